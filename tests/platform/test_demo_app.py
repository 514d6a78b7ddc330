"""The demos live in the demo app: its management commands keep their names, and its python tools
are registered under their new module name, by default and when a deployment's .env still names
the module they came from (tools.builtin.demo)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent.parent
DEMO_TOOLS = {"mojitianqi-DayWeather", "gaodedetu-plan_driving", "gaodedetu-plan_bicycle"}

REGISTRY_PROBE = """
import json
import django
from django.conf import settings
django.setup()
from tools.registry import registry
print(json.dumps({
    "modules": settings.AGENTRY_TOOL_MODULES,
    "tools": {tool.name: tool.func.__module__ for tool in registry.all()},
}))
"""


def _registry(tmp_path, env_file: str | None) -> dict:
    """The tool modules and registered tools of the production settings, in a fresh interpreter
    whose only configuration is `env_file` (a deployment's .env)."""
    env = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "platform_site.settings",
        "AGENTRY_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": "",
        "AGENTRY_ENV_FILE": "",
    }
    if env_file is not None:
        path = tmp_path / "agentry.env"
        path.write_text(env_file)
        env["AGENTRY_ENV_FILE"] = str(path)
    result = subprocess.run(
        [sys.executable, "-c", REGISTRY_PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_the_demo_tools_are_registered_from_the_demo_app_by_default(tmp_path):
    found = _registry(tmp_path, None)
    assert found["modules"] == ["demo.tools", "tools.builtin.common"]
    assert {name: found["tools"].get(name) for name in DEMO_TOOLS} == dict.fromkeys(DEMO_TOOLS, "demo.tools")
    assert found["tools"]["calculator"] == "tools.builtin.common"


def test_an_env_file_naming_the_old_demo_tool_module_still_registers_the_demo_tools(tmp_path):
    found = _registry(tmp_path, "AGENTRY_TOOL_MODULES=tools.builtin.demo,tools.builtin.common\n")
    assert found["modules"] == ["demo.tools", "tools.builtin.common"]
    assert {name: found["tools"].get(name) for name in DEMO_TOOLS} == dict.fromkeys(DEMO_TOOLS, "demo.tools")


def test_the_demo_commands_keep_their_names_and_come_from_the_demo_app():
    commands = get_commands()
    assert {name: commands.get(name) for name in ("agentry_demo", "agentry_chat", "agentry_seed_demo")} == {
        "agentry_demo": "demo",
        "agentry_chat": "demo",
        "agentry_seed_demo": "demo",
    }
    # The eval command is the operators' own, not the demo's: it stays with the evals.
    assert commands["agentry_eval"] == "evals"
