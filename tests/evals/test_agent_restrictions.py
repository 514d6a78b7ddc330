"""An agent restricted to groups can be evaluated only by those who may use it: the admin's
form and collect action, the API, the command (with --user) and the service itself all ask the
same check (evals.services.eval_agent_check)."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Group, Permission, User
from django.core.management import CommandError, call_command
from django.urls import reverse

from agents.services import agent_version_current
from conversations.models import Run
from evals.models import EvalResult, EvalRun
from evals.services import EvalNotAllowed, eval_run_start
from tests.evals.helpers import four_case_suite
from tests.support.api import client_for
from tests.support.factories import make_agent

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/eval-runs/"


def _operator(name: str, *groups: Group) -> User:
    user = User.objects.create_user(username=name, password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="evals", codename__in=["add_evalrun", "view_evalrun"])
    )
    user.groups.set(groups)
    return user


@pytest.fixture
def restricted():
    """An agent only the "finance" group may use, a suite, a member and an outsider."""
    finance = Group.objects.create(name="finance")
    agent = make_agent(tools=["test-echo"], name="Ledger bot")
    agent.allowed_groups.add(finance)
    return {
        "agent": agent,
        "suite": four_case_suite(),
        "member": _operator("member", finance),
        "outsider": _operator("outsider"),
    }


def test_the_admin_form_refuses_an_agent_the_operator_may_not_use(client, no_enqueue, restricted):
    url = reverse("admin:evals_evalrun_add")
    form = {"suite": restricted["suite"].pk, "agent": restricted["agent"].pk, "version": "draft", "repetitions": "1"}

    client.force_login(restricted["outsider"])
    page = client.get(url).content.decode()
    assert "Ledger bot" not in page  # not offered
    response = client.post(url, form)
    assert response.status_code == 200 and "errorlist" in response.content.decode()
    assert not EvalRun.objects.exists() and not Run.objects.exists()

    client.force_login(restricted["member"])
    assert "Ledger bot" in client.get(url).content.decode()
    assert client.post(url, form).status_code == 302
    assert EvalRun.objects.get().created_by == restricted["member"]


def test_the_service_refuses_whatever_calls_it(no_enqueue, restricted):
    version = agent_version_current(agent=restricted["agent"])
    with pytest.raises(EvalNotAllowed, match="Ledger bot"):
        eval_run_start(suite=restricted["suite"], agent_version=version, repetitions=1, user=restricted["outsider"])
    assert not EvalRun.objects.exists() and not Run.objects.exists()
    # The platform itself (no user) and a member may.
    assert eval_run_start(suite=restricted["suite"], agent_version=version, repetitions=1, user=None)
    assert eval_run_start(suite=restricted["suite"], agent_version=version, repetitions=1, user=restricted["member"])


def test_the_api_refuses_an_agent_the_user_may_not_use(no_enqueue, restricted):
    body = {"suite": restricted["suite"].pk, "agent": restricted["agent"].slug}
    response = client_for(restricted["outsider"]).post(RUNS, body, format="json")
    assert response.status_code == 400 and "agent" in response.json()["extra"]["fields"]
    assert not EvalRun.objects.exists()
    assert client_for(restricted["member"]).post(RUNS, body, format="json").status_code == 201


def test_the_admin_collect_action_skips_eval_runs_of_agents_the_operator_may_not_use(client, restricted):
    version = agent_version_current(agent=restricted["agent"])
    eval_run = EvalRun.objects.create(suite=restricted["suite"], agent_version=version, repetitions=1)
    # A result whose run was purged: collecting scores it at once.
    EvalResult.objects.create(eval_run=eval_run, case=restricted["suite"].cases.first(), repetition=1, run=None)
    action = {"action": "collect", ACTION_CHECKBOX_NAME: [eval_run.pk]}
    url = reverse("admin:evals_evalrun_changelist")

    client.force_login(restricted["outsider"])
    response = client.post(url, action, follow=True)
    assert f"eval runs {eval_run.pk}" in response.content.decode()
    assert not EvalResult.objects.get(eval_run=eval_run).scored

    client.force_login(restricted["member"])
    client.post(url, action)
    assert EvalResult.objects.get(eval_run=eval_run).scored


def test_the_command_runs_as_a_user_only_on_agents_they_may_use(restricted):
    args = ["agentry_eval", restricted["agent"].slug, "--suite", "basics", "--against", "draft", "--fresh"]
    with pytest.raises(CommandError, match="Ledger bot"):
        call_command(*args, "--user", "outsider")
    with pytest.raises(CommandError, match="No active user"):
        call_command(*args, "--user", "nobody")
    assert not EvalRun.objects.exists()
