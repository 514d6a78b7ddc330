"""Agents as tools and who reads what: a delegate never widens access (refused on save in the
admin and at run time), model calls' requests (system prompts) stay out of exports for users who
may not read agents' configuration, the parent's API totals with its delegated runs, and a
forced tool choice that names a delegate."""

import json
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, Permission, User
from django.test import AsyncClient
from django.urls import reverse

from agents.models import AgentDelegate
from agents.services import agent_version_current
from agents.snapshot import snapshot_tool
from conversations.models import Conversation, Run, ToolInvocation
from conversations.services import conversation_create
from tests.support.admin_forms import agent_admin_inlines
from tests.support.api import client_for
from tests.support.factories import make_user, token_for
from tests.support.llm import agent_on
from tests.support.runs import advance, start_run

pytestmark = pytest.mark.django_db

SECRET_PROMPT = "You are the payroll agent. Rule 7: salaries are confidential."
PRICES = {"price_input_per_million": 1000, "price_output_per_million": 2000}


def _script(*steps: dict) -> dict:
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def _payroll(fake_llm, **fields):
    return agent_on(fake_llm, _script({"content": "the figures"}), tools=(), system_prompt=SECRET_PROMPT, **fields)


def _asking(fake_llm, name: str, **fields):
    steps = (
        {"tool_calls": [{"name": name, "arguments": {"task": "salaries?"}}]},
        {"content": "Got: {last_tool_result}"},
    )
    return agent_on(fake_llm, _script(*steps), tools=(), **fields)


@pytest.fixture
def restricted(fake_llm, no_enqueue):
    """A parent every user may use, delegating to an agent kept to the group "payroll" (a row
    saved as if before the check existed: the run-time check must hold on its own)."""
    group = Group.objects.create(name="payroll")
    child = _payroll(fake_llm)
    child.allowed_groups.add(group)
    parent = _asking(fake_llm, "ask_payroll")
    AgentDelegate.objects.create(parent=parent, child=child, tool_name="ask_payroll", description="Ask payroll.")
    return parent, child, group


@async_to_sync
async def _exported(headers: dict) -> bytes:
    response = await AsyncClient().get("/api/v1/runs/export/", {"format": "jsonl"}, headers=headers)
    assert response.status_code == 200
    return b"".join([chunk async for chunk in response.streaming_content])


def _export(user) -> list[dict]:
    """GET /api/v1/runs/export/ as the user (through the ASGI handler), its runs parsed."""
    body = _exported({"Authorization": f"Bearer {token_for(user)}"}).decode()
    return [json.loads(line) for line in body.splitlines()]


# Commits: the API token is read on a thread of the async view, with a connection of its own.
@pytest.mark.django_db(transaction=True)
def test_a_user_who_may_not_use_the_delegated_agent_gets_no_run_of_it(restricted):
    parent, child, _ = restricted
    outsider = make_user()
    run = advance(start_run(parent, conversation=conversation_create(agent=parent, owner=outsider)))

    # The model reads why and answers; nothing of the restricted agent ran for this user.
    assert run.status == "completed" and not Run.objects.filter(agent=child).exists()
    call = ToolInvocation.objects.get(run=run)
    assert call.error == "delegation refused" and "not available to the user" in call.result

    api = client_for(outsider)
    assert [c["agent"] for c in api.get("/api/v1/conversations/").json()["results"]] == [parent.slug]
    assert [r["id"] for r in api.get("/api/v1/runs/").json()["results"]] == [str(run.pk)]
    steps = api.get(f"/api/v1/runs/{run.pk}/steps/").json()["results"]
    (tool_step,) = [s for s in steps if s["kind"] == "tool_invocation"]
    assert tool_step["child_runs"] == [] and tool_step["status"] == "error"
    exported = _export(outsider)
    assert [r["id"] for r in exported] == [str(run.pk)]
    assert SECRET_PROMPT not in json.dumps(exported)


# Commits: the API token is read on a thread of the async view, with a connection of its own.
@pytest.mark.django_db(transaction=True)
def test_a_member_of_the_group_delegates_and_reads_the_child_but_not_its_system_prompt(restricted):
    parent, child, group = restricted
    member = make_user(groups=[group])
    run = advance(start_run(parent, conversation=conversation_create(agent=parent, owner=member)))
    delegated = Run.objects.get(parent_run=run)
    advance(delegated)
    assert advance(run).status == "completed"

    api = client_for(member)
    assert {r["id"] for r in api.get("/api/v1/runs/").json()["results"]} == {str(run.pk), str(delegated.pk)}
    steps = api.get(f"/api/v1/runs/{delegated.pk}/steps/").json()["results"]
    assert steps and SECRET_PROMPT not in json.dumps(steps)
    exported = _export(member)
    assert {r["id"] for r in exported} == {str(run.pk), str(delegated.pk)}
    calls = [call for record in exported for call in record["llm_calls"]]
    assert calls and all("request" not in call for call in calls)
    assert SECRET_PROMPT not in json.dumps(exported)

    # Staff who see everyone's runs read the requests only with the view permission on agents.
    auditor = make_user(staff=True)
    auditor.user_permissions.add(Permission.objects.get(codename="view_run"))
    assert SECRET_PROMPT not in json.dumps(_export(auditor))
    auditor.user_permissions.add(Permission.objects.get(codename="view_agent"))
    (child_record,) = [r for r in _export(User.objects.get(pk=auditor.pk)) if r["id"] == str(delegated.pk)]
    assert SECRET_PROMPT in json.dumps(child_record["llm_calls"][0]["request"])


def test_the_parents_api_totals_include_its_delegated_runs(fake_llm, no_enqueue):
    owner = make_user()
    child = _payroll(fake_llm, model_fields=PRICES)
    parent = _asking(fake_llm, "ask_payroll", model_fields=PRICES)
    AgentDelegate.objects.create(parent=parent, child=child, tool_name="ask_payroll", description="Ask payroll.")
    run = advance(start_run(parent, conversation=conversation_create(agent=parent, owner=owner)))
    delegated = advance(Run.objects.get(parent_run=run))
    run = advance(run)
    assert run.status == "completed" and delegated.total_tokens > 0 and delegated.cost > 0

    body = client_for(owner).get(f"/api/v1/runs/{run.pk}/").json()
    assert body["usage"]["total_tokens"] == run.total_tokens
    assert Decimal(body["cost"]) == run.cost
    assert body["total_tokens_with_delegates"] == run.total_tokens + delegated.total_tokens
    assert Decimal(body["cost_with_delegates"]) == run.cost + delegated.cost
    leaf = client_for(owner).get(f"/api/v1/runs/{delegated.pk}/").json()
    assert leaf["total_tokens_with_delegates"] == delegated.total_tokens


def _agent_form(agent, **fields) -> dict:
    return {
        "name": agent.name,
        "slug": agent.slug,
        "is_active": "on",
        "time_zone": "UTC",
        "language": "en",
        "model_config": agent.model_config_id,
        "max_iterations": 8,
        "max_same_tool_streak": 3,
        "tool_choice": "auto",
        "tool_choice_name": "",
        "parallel_tool_calls": "on",
        "concurrent_messages": "reject",
        **agent_admin_inlines(delegates=1),
        "delegates-0-tool_name": "ask_payroll",
        "delegates-0-description": "Ask payroll.",
        "delegates-0-enabled": "on",
        **fields,
    }


def test_the_admin_refuses_a_delegate_to_a_more_restricted_agent(client, fake_llm, no_enqueue):
    group = Group.objects.create(name="payroll")
    child = _payroll(fake_llm)
    child.allowed_groups.add(group)
    parent = _asking(fake_llm, "ask_payroll")
    client.force_login(User.objects.create_superuser("root", password="pw"))
    url = reverse("admin:agents_agent_change", args=[parent.pk])

    refused = client.post(url, _agent_form(parent, **{"delegates-0-child": child.pk}))
    assert refused.status_code == 200 and "Share it with every group of this agent first" in refused.content.decode()
    assert not AgentDelegate.objects.filter(parent=parent).exists()

    parent.allowed_groups.add(group)  # the parent's users are all allowed the child: nothing widens
    assert client.post(url, _agent_form(parent, **{"delegates-0-child": child.pk})).status_code == 302
    assert AgentDelegate.objects.filter(parent=parent, child=child).exists()


def test_the_admin_takes_a_forced_tool_choice_that_names_a_delegate(client, fake_llm, no_enqueue):
    child = _payroll(fake_llm)
    parent = _asking(fake_llm, "ask_payroll")
    client.force_login(User.objects.create_superuser("root", password="pw"))
    url = reverse("admin:agents_agent_change", args=[parent.pk])
    forced = {"tool_choice": "tool", "tool_choice_name": "ask_payroll", "delegates-0-child": child.pk}

    # A disabled delegate is no tool of the agent: the engine would refuse it, so does the admin.
    refused = client.post(url, _agent_form(parent, **forced, **{"delegates-0-enabled": ""}))
    assert refused.status_code == 200
    assert "which is not among this agent&#x27;s enabled tools" in refused.content.decode()

    assert client.post(url, _agent_form(parent, **forced)).status_code == 302
    parent.refresh_from_db()
    assert (parent.tool_choice, parent.tool_choice_name) == ("tool", "ask_payroll")
    assert snapshot_tool(agent_version_current(agent=parent).snapshot, "ask_payroll") is not None
    # And the run the engine makes of it calls the delegate first.
    owner = make_user()
    run = advance(start_run(parent, conversation=conversation_create(agent=parent, owner=owner)))
    assert run.status == "awaiting_children" and Conversation.objects.filter(agent=child, owner=owner).exists()
