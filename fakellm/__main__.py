"""Command line: python -m fakellm --host 127.0.0.1 --port 8901 [--script NAME=PATH ...]"""

from __future__ import annotations

import argparse
import sys

import uvicorn

from fakellm.app import create_app
from fakellm.loader import load_default_scripts, parse_script_option
from fakellm.validation import ScriptError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fakellm", description="Scriptable fake LLM server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8901)
    parser.add_argument(
        "--script", action="append", default=[], metavar="NAME=PATH", help="add or replace a script (repeatable)"
    )
    args = parser.parse_args(argv)

    scripts = load_default_scripts()
    try:
        scripts.update(parse_script_option(option) for option in args.script)
        app = create_app(scripts)
    except (OSError, ValueError, ScriptError) as exc:
        parser.error(str(exc))
    print(f"fakellm serving {', '.join(sorted(scripts))} on http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
