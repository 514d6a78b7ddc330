"""What the API answers with a 400 (deep nesting, NUL, lone surrogates, infinite numbers), the
JSONL import (admin page and command) answers with a form error or a command error, and the
admin's case forms too: never a 500, and nothing is imported."""

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from evals.models import EvalCase, EvalSuite
from tests.support.api import client_for
from tests.support.factories import make_user

pytestmark = pytest.mark.django_db

GOOD = '{"name": "ok", "turns": [{"role": "user", "content": "hi"}]}'
TURNS = '[{"role": "user", "content": "hi"}]'
BAD_LINES = {
    "deep": '{"name": "deep", "turns": ' + TURNS + ', "tool_results": ' + "[" * 5000 + "]" * 5000 + "}",
    "nul in a value": '{"name": "nul", "turns": [{"role": "user", "content": "a\\u0000b"}]}',
    "nul in the name": '{"name": "n\\u0000", "turns": ' + TURNS + "}",
    "nul in text": '{"name": "t", "turns": ' + TURNS + ', "answer_contains": "x\\u0000"}',
    "lone surrogate": '{"name": "s", "turns": [{"role": "user", "content": "\\ud800"}]}',
    "surrogate in the name": '{"name": "\\udfff", "turns": ' + TURNS + "}",
    "infinite number": '{"name": "i", "turns": ' + TURNS + ', "max_tokens": 1e999}',
    # Recorded calls (a replayed run's): {"name": text, "arguments": object, "result": text, "error": bool}.
    "recorded calls not a list": '{"name": "r", "turns": ' + TURNS + ', "recorded_calls": {"name": "x"}}',
    "recorded call without a result": '{"name": "r", "turns": ' + TURNS + ', "recorded_calls": '
    '[{"name": "x", "arguments": {}}]}',
    "recorded call with text arguments": '{"name": "r", "turns": ' + TURNS + ', "recorded_calls": '
    '[{"name": "x", "arguments": "a=1", "result": "ok"}]}',
    "recorded call with a text error": '{"name": "r", "turns": ' + TURNS + ', "recorded_calls": '
    '[{"name": "x", "arguments": {}, "result": "ok", "error": "yes"}]}',
    "recorded call with an unknown key": '{"name": "r", "turns": ' + TURNS + ', "recorded_calls": '
    '[{"name": "x", "arguments": {}, "result": "ok", "when": 1}]}',
    "recorded call without a name": '{"name": "r", "turns": ' + TURNS + ', "recorded_calls": '
    '[{"name": "", "arguments": {}, "result": "ok"}]}',
}


@pytest.fixture
def importer(client):
    user = User.objects.create_user(username="importer", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="evals"))
    client.force_login(user)
    return client


@pytest.mark.parametrize("kind", BAD_LINES)
def test_the_admin_import_answers_a_form_error(importer, kind):
    upload = SimpleUploadedFile("cases.jsonl", (GOOD + "\n" + BAD_LINES[kind] + "\n").encode())
    response = importer.post(reverse("admin:evals_evalsuite_import"), {"suite": "uploaded", "file": upload})
    assert response.status_code == 400, kind
    assert "line 2:" in response.content.decode() and "errorlist" in response.content.decode()
    assert not EvalSuite.objects.filter(name="uploaded").exists()


@pytest.mark.parametrize("kind", BAD_LINES)
def test_the_command_import_answers_a_command_error(tmp_path, kind):
    path = tmp_path / "cases.jsonl"
    path.write_text(GOOD + "\n" + BAD_LINES[kind] + "\n", encoding="utf-8")
    with pytest.raises(CommandError, match="line 2:"):
        call_command("agentry_eval_cases", "import", "cmd", str(path))
    assert not EvalCase.objects.exists()


@pytest.mark.parametrize("kind", BAD_LINES)
def test_the_api_answers_the_same_lines_with_a_400(kind):
    suite = EvalSuite.objects.create(name="api")
    user = make_user()
    user.user_permissions.add(Permission.objects.get(codename="add_evalcase"))
    response = client_for(user).post(
        f"/api/v1/eval-suites/{suite.pk}/cases/", BAD_LINES[kind], content_type="application/json"
    )
    assert response.status_code == 400, (kind, response.content)
    assert not EvalCase.objects.exists()


def test_a_nul_typed_into_the_admins_case_form_is_a_form_error(importer):
    form = {
        "suite": EvalSuite.objects.create(name="s").pk,
        "name": "c",
        "position": "0",
        "turns": json.dumps([{"role": "user", "content": "a\x00b"}]),
        "expected_tool_calls": "[]",
        "forbidden_tools": "[]",
        "answer_schema": "",
        "tool_results": json.dumps({"t": "\x00"}),
    }
    response = importer.post(reverse("admin:evals_evalcase_add"), form)
    assert response.status_code == 200 and "U+0000" in response.content.decode()
    assert not EvalCase.objects.exists()
