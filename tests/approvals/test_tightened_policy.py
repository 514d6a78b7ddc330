"""Tightening a tool's approval policy applies at once to every live version; loosening it waits
for a release. A published version keeps the policy it pinned unless the tool's (or the agent's
override of it) is stricter now, and the tool's admin page says which one live traffic gets."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import AgentTool
from agents.releases import canary_start, version_publish
from conversations.models import Approval, Run, ToolInvocation
from tests.approvals.conftest import counter_steps
from tests.support.runs import advance
from tests.support.waits import wait_for
from tools.models import ToolDefinition

NEVER = {"test-counter": {"approval_policy": "never"}}


def _published(scenario, admin_user, **kwargs):
    s = scenario(tool_settings=NEVER, **kwargs)
    version_publish(agent=s.agent, user=admin_user, note="v1: the counter runs unasked")
    return s


def _tighten(**fields) -> None:
    ToolDefinition.objects.filter(name="test-counter").update(**fields)


@pytest.mark.e2e
def test_a_tightened_tool_parks_the_published_version_s_run_on_a_real_worker(worker, scenario, admin_user, executions):
    s = _published(scenario, admin_user, steps=counter_steps("tightened"))
    _tighten(approval_policy="always")

    run = s.post()

    run = wait_for(
        lambda: Run.objects.filter(pk=run.pk, status="awaiting_approval").first(),
        timeout=30,
        message=f"run {run.pk} to await approval (is {Run.objects.get(pk=run.pk).status})",
    )
    s.agent.refresh_from_db()
    assert run.agent_version_id == s.agent.published_version_id
    assert Approval.objects.get(run=run).status == "pending" and executions("tightened") == 0


@pytest.mark.django_db
@pytest.mark.parametrize("labels", [("one",), ("one", "two")])  # decided with the answer, and in the tool step
def test_every_call_of_a_tightened_tool_asks(scenario, admin_user, enqueued, executions, labels):
    s = _published(scenario, admin_user, steps=counter_steps(*labels))
    _tighten(approval_policy="always")

    run = advance(s.post())

    assert run.status == "awaiting_approval"
    assert [a.request_reason for a in Approval.objects.filter(run=run)] == ["policy: always"] * len(labels)
    assert all(executions(label) == 0 for label in labels)


@pytest.mark.django_db
def test_a_rule_added_to_the_tool_asks_when_it_matches(scenario, admin_user, enqueued, executions):
    s = _published(scenario, admin_user, steps=counter_steps("big", "small"))
    _tighten(approval_policy="rule", approval_rule='label == "big"')

    run = advance(s.post())

    asked = Approval.objects.get(run=run)
    assert asked.arguments == {"label": "big"} and "matched" in asked.request_reason
    assert executions("small") == 1 and executions("big") == 0


@pytest.mark.django_db
def test_a_rule_on_the_agent_s_link_tightens_its_live_version_too(scenario, admin_user, enqueued, executions):
    s = _published(scenario, admin_user, steps=counter_steps("linked"))
    AgentTool.objects.filter(agent=s.agent, tool__name="test-counter").update(
        approval="rule", approval_rule='label == "linked"'
    )

    run = advance(s.post())

    assert run.status == "awaiting_approval" and executions("linked") == 0


@pytest.mark.django_db
def test_loosening_waits_for_a_release(scenario, admin_user, enqueued, executions):
    s = scenario(steps=counter_steps("loose"))  # the counter is a write: it asks
    version_publish(agent=s.agent, user=admin_user, note="v1: asks")
    _tighten(approval_policy="never")

    run = advance(s.post())

    assert run.status == "awaiting_approval" and executions("loose") == 0
    assert ToolInvocation.objects.get(run=run).status == "awaiting_approval"


@pytest.mark.django_db
def test_the_tool_page_shows_what_each_live_version_applies(scenario, admin_user, client):
    s = _published(scenario, admin_user, steps=counter_steps("page"))
    AgentTool.objects.filter(agent=s.agent, tool__name="test-echo").update(description_override="Echo, v2.")
    canary_start(agent=s.agent, percent=10, user=admin_user, note="v2")
    _tighten(approval_policy="always")
    client.force_login(admin_user)
    tool = ToolDefinition.objects.get(name="test-counter")

    page = client.get(f"/admin/tools/tooldefinition/{tool.pk}/change/").content.decode()

    name = s.agent.name
    assert f"{name} v1 (published): always asks — stricter than the never asks the version pinned" in page
    assert f"{name} v2 (canary): always asks — stricter than the never asks the version pinned" in page

    AgentTool.objects.filter(agent=s.agent, tool__name="test-counter").update(approval="never")
    page = client.get(f"/admin/tools/tooldefinition/{tool.pk}/change/").content.decode()
    # The agent overrides the tool with "never": a release would pin what v1 pinned.
    assert f"{name} v1 (published): never asks" in page and "stricter than" not in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    "tool_settings,link",
    [
        (NEVER, {}),
        ({}, {"approval": "never"}),
        ({"test-counter": {"approval_policy": "rule", "approval_rule": 'label == "big"'}}, {}),
        ({}, {"approval": "rule", "approval_rule": 'label == "big"'}),
    ],
)
def test_an_unchanged_policy_lets_the_answer_start_its_call(
    scenario, admin_user, enqueued, executions, tool_settings, link
):
    # The answer's statement marks a call that runs at once only while the tool's approval is
    # the one the version pinned; these all still are, so no step marks the call on its own.
    s = scenario(steps=counter_steps("small"), tool_settings=tool_settings)
    AgentTool.objects.filter(agent=s.agent, tool__name="test-counter").update(**link)
    version_publish(agent=s.agent, user=admin_user, note="v1")

    with CaptureQueriesContext(connection) as queries:
        run = advance(s.post())

    assert run.status == "completed" and executions("small") == 1
    marks = [q["sql"] for q in queries if 'UPDATE "conversations_toolinvocation" SET "status"' in q["sql"]]
    assert not [sql for sql in marks if '"started_at" = ' in sql]
