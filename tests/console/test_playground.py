"""The prompt playground (database tier): a test message starts two sandboxed runs (the edited
draft's, on a playground version with exactly the edits, and the live version's); playground
versions are deduplicated, never listed, numbered nor released; playground runs stay out of the
production figures; "save as draft" writes the agent through its validation and the audit sees
it; an eval run starts on the draft. The views: permissions, workspace, CSRF, bad input, and
the page's statement count."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.models import AgentTool, AgentVersion, ModelConfig
from agents.playground import PlaygroundEdits, playground_save
from agents.releases import ReleaseRefused, UnknownVersion, version_publish, version_rollback, version_target
from agents.run_choices import RunChoiceRefused
from agents.selectors import agent_versions
from agents.services import agent_version_current
from alerts.models import AlertRule
from alerts.selectors import window_runs
from audit.models import ConfigChange
from console.playground.services import playground_eval, playground_send
from conversations.models import Message, Run, RunTrigger, ToolInvocation
from conversations.monitoring.models import LLMCallHourly, RunHourly
from conversations.monitoring.rollups import rollups_refresh
from engine.invocations import NOT_RUN_IN_PLAYGROUND, Settled, call_decision
from evals.models import EvalCase, EvalSuite
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tests.support.ledger import ledger_call, ledger_run
from tools.models import ToolDefinition
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

PROMPT = "You answer questions about the weather."


@pytest.fixture
def agent():
    """A published agent (version 1) with the read tool test-echo; test-counter (a write tool) is
    in its workspace but not linked."""
    agent = make_agent(name="Weather desk", slug="weather-desk", system_prompt=PROMPT, tools=["test-echo"])
    version_publish(agent=agent, user=make_user(), note="first")
    agent.refresh_from_db()
    return agent


def _tool(name: str, agent) -> ToolDefinition:
    return ToolDefinition.objects.get(workspace_id=agent.workspace_id, name=name)


def _edits(agent, **changes) -> PlaygroundEdits:
    return PlaygroundEdits(
        agent_fields={"system_prompt": changes.pop("prompt", PROMPT + " Be brief.")},
        model_config=changes.pop("model_config", None),
        model_params=changes.pop("model_params", {}),
        tools=changes.pop("tools", None),
    )


@pytest.fixture
def staff(staff):
    """The on-call member who may also test agent versions: trying an edited draft is testing one
    (agents.run_choices)."""
    staff.user_permissions.add(Permission.objects.get(content_type__app_label="agents", codename="test_agent_version"))
    return get_user_model().objects.get(pk=staff.pk)


# Services


def test_a_message_starts_the_draft_and_the_live_version_sandboxed(agent, staff):
    counter = _tool("test-counter", agent)
    edits = _edits(agent, model_params={"temperature": 0.2}, tools=[_tool("test-echo", agent), counter])
    pair = playground_send(agent=agent, user=staff, edits=edits, content="Weather in Hangzhou?")

    draft, live = pair.draft, pair.live
    assert draft.agent_version.playground and draft.agent_version.number == 0
    snapshot = draft.agent_version.snapshot
    assert snapshot["agent"]["system_prompt"] == PROMPT + " Be brief."
    assert snapshot["model"]["temperature"] == 0.2
    assert [tool["name"] for tool in snapshot["tools"]] == ["test-counter", "test-echo"]
    assert live.agent_version_id == agent.published_version_id
    assert live.agent_version.snapshot["agent"]["system_prompt"] == PROMPT
    for run in (draft, live):
        assert run.trigger == RunTrigger.PLAYGROUND
        assert run.sandbox["playground"] is True and run.sandbox["live_reads"] is True
        assert run.conversation.owner == staff and run.conversation.metadata["source"] == "playground"
        assert Message.objects.get(run=run, role="user").content == "Weather in Hangzhou?"
    assert draft.conversation_id != live.conversation_id
    # Nothing of the agent changed: its draft is still what was saved.
    agent.refresh_from_db()
    assert agent.system_prompt == PROMPT
    assert not agent.agent_tools.filter(tool=counter).exists()


def test_without_a_published_version_the_live_side_runs_the_saved_draft(staff):
    agent = make_agent(slug="never-published", system_prompt=PROMPT)
    pair = playground_send(agent=agent, user=staff, edits=_edits(agent), content="hi")
    assert pair.live.agent_version == agent_version_current(agent=agent)
    assert not pair.live.agent_version.playground


def test_playground_versions_are_deduplicated_and_never_real_versions(agent, staff):
    first = playground_send(agent=agent, user=staff, edits=_edits(agent), content="one").draft.agent_version
    second = playground_send(agent=agent, user=staff, edits=_edits(agent), content="two").draft.agent_version
    assert first == second
    other = playground_send(agent=agent, user=staff, edits=_edits(agent, prompt="Other."), content="x")
    assert other.draft.agent_version != first

    # The same configuration as the saved draft still gets a playground version, and the draft
    # stays the real one.
    unchanged = playground_send(agent=agent, user=staff, edits=_edits(agent, prompt=PROMPT), content="same")
    assert unchanged.draft.agent_version.playground
    assert unchanged.draft.agent_version.config_hash == agent.published_version.config_hash
    assert agent_version_current(agent=agent) == agent.published_version

    assert [v.number for v in agent_versions(agent=agent)] == [1]
    with pytest.raises(UnknownVersion):
        version_target(agent=agent, target=0)
    with pytest.raises(ReleaseRefused, match="playground"):
        version_rollback(agent=agent, version=first, user=staff)
    agent.system_prompt = "Changed."
    agent.save()
    assert agent_version_current(agent=agent).number == 2


def test_a_past_run_is_sent_again_with_its_earlier_turns(agent, staff):
    source = ledger_run(agent, finished_at=timezone.now())
    Message.objects.bulk_create(
        [
            Message(conversation=source.conversation, order=1, role="user", content="I live in Hangzhou."),
            Message(conversation=source.conversation, order=2, role="assistant", content="Noted."),
            Message(conversation=source.conversation, order=3, role="user", content="Weather tomorrow?", run=source),
        ]
    )
    pair = playground_send(agent=agent, user=staff, edits=_edits(agent), source=source)
    for run in (pair.draft, pair.live):
        rows = list(Message.objects.filter(conversation_id=run.conversation_id).order_by("order"))
        assert [(m.role, m.content) for m in rows] == [
            ("user", "I live in Hangzhou."),
            ("assistant", "Noted."),
            ("user", "Weather tomorrow?"),
        ]
        assert rows[-1].run_id == run.pk and rows[0].run_id is None
        assert run.conversation.metadata["from_run"] == str(source.pk)


def test_a_bad_edit_is_refused_by_the_models_validation(agent, staff):
    bravo = Workspace.objects.create(name="Bravo", slug="bravo")
    theirs = ModelConfigFactory(workspace=bravo)
    with pytest.raises(ValidationError):
        playground_send(agent=agent, user=staff, edits=_edits(agent, model_config=theirs), content="x")
    their_tool = ToolDefinition.objects.create(workspace=bravo, name="bravo-tool", kind="python", python_callable="x")
    with pytest.raises(ValidationError):
        playground_send(agent=agent, user=staff, edits=_edits(agent, tools=[their_tool]), content="x")
    with pytest.raises(ValidationError):
        edits = PlaygroundEdits(agent_fields={"max_iterations": 0})
        playground_send(agent=agent, user=staff, edits=edits, content="x")
    assert not AgentVersion.objects.filter(playground=True).exists()


def test_a_write_tool_never_runs_in_a_playground_run(agent, staff):
    edits = _edits(agent, tools=[_tool("test-counter", agent)])
    run = playground_send(agent=agent, user=staff, edits=edits, content="count").draft
    spec = next(tool for tool in run.agent_version.snapshot["tools"] if tool["name"] == "test-counter")
    invocation = ToolInvocation(run=run, tool_name="test-counter", tool_call_id="c1", arguments={"label": "x"})
    decision = call_decision(invocation=invocation, spec=spec, approval=None, blocked=None, sandbox=run.sandbox)
    assert isinstance(decision, Settled) and decision.error == NOT_RUN_IN_PLAYGROUND


def test_playground_runs_stay_out_of_production_figures(agent, staff):
    now = timezone.now()
    production = ledger_run(agent, finished_at=now, created_at=now - timedelta(minutes=2))
    ledger_call(production, started_at=now - timedelta(minutes=1))
    pair = playground_send(agent=agent, user=staff, edits=_edits(agent), content="hi")
    for run in (pair.draft, pair.live):
        Run.objects.filter(pk=run.pk).update(status="failed", stop_reason="provider_error", finished_at=now)
        ledger_call(run, started_at=now - timedelta(minutes=1), status="failed", error="boom")
    rollups_refresh(since=now - timedelta(hours=2))
    assert sum(RunHourly.objects.filter(agent=agent).values_list("runs", flat=True)) == 1
    assert not RunHourly.objects.filter(agent=agent, status="failed").exists()
    assert sum(LLMCallHourly.objects.filter(agent=agent).values_list("calls", flat=True)) == 1
    rule = AlertRule.objects.create(name="failures", kind=AlertRule.Kind.FAILURE_RATE, agent=agent, threshold=10)
    assert window_runs(rule=rule, now=now + timedelta(minutes=1)) == {"ended": 1, "failed": 0}


def test_save_as_draft_writes_the_agent_and_its_tools(agent, staff):
    counter, echo = _tool("test-counter", agent), _tool("test-echo", agent)
    edits = _edits(agent, tools=[counter], model_params={"temperature": 0.1})
    saved = playground_save(agent=agent, edits=edits)
    agent.refresh_from_db()
    assert saved.system_prompt == agent.system_prompt == PROMPT + " Be brief."
    links = {link.tool_id: link.enabled for link in AgentTool.objects.filter(agent=agent)}
    assert links == {counter.pk: True, echo.pk: False}
    # The model config is shared: its parameters are not the agent's to change.
    assert ModelConfig.objects.get(pk=agent.model_config_id).temperature != 0.1
    # The saved draft is now a new version, unpublished.
    assert agent_version_current(agent=agent).number == 2
    with pytest.raises(ValidationError):
        playground_save(agent=agent, edits=PlaygroundEdits(agent_fields={"tool_choice": "tool"}))


def test_an_eval_run_starts_on_the_draft(agent, staff):
    suite = EvalSuite.objects.create(name="Weather suite")
    EvalCase.objects.create(suite=suite, name="hello", turns=[{"role": "user", "content": "hello"}])
    eval_run = playground_eval(agent=agent, user=staff, edits=_edits(agent), suite=suite)
    assert eval_run.agent_version.playground
    assert eval_run.agent_version.snapshot["agent"]["system_prompt"] == PROMPT + " Be brief."
    assert eval_run.results.get().run.trigger == RunTrigger.EVAL
    # Saved, the same draft is evaluated as the agent's own draft version: what its release gate reads.
    playground_save(agent=agent, edits=_edits(agent))
    agent.refresh_from_db()
    saved = playground_eval(agent=agent, user=staff, edits=_edits(agent), suite=suite)
    assert not saved.agent_version.playground and saved.agent_version == agent_version_current(agent=agent)
    assert saved.agent_version.config_hash == eval_run.agent_version.config_hash


# Views


def page_url(agent, action: str = "") -> str:
    return reverse(f"monitoring:playground{'-' + action if action else ''}", args=[agent.slug])


def _form(agent, **changes) -> dict:
    data = {
        "system_prompt": PROMPT + " Be brief.",
        "model_config": agent.model_config_id,
        "max_iterations": 8,
        "max_same_tool_streak": 3,
        "tool_choice": "auto",
        "parallel_tool_calls": "on",
        "tools": [_tool("test-echo", agent).pk],
        "content": "Weather?",
    }
    data.update(changes)
    return {key: value for key, value in data.items() if value is not None}


@pytest.fixture
def operator(client):
    """May try agents and view them (the playground), and change agents (save, evaluate)."""
    user = get_user_model().objects.create_user("playground-op", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["view_run", "add_run", "view_agent", "change_agent", "test_agent_version"],
            content_type__app_label__in=["conversations", "agents"],
        )
    )
    client.force_login(user)
    return user


def test_the_page_starts_from_the_saved_draft(client, operator, agent):
    response = client.get(page_url(agent))
    assert response.status_code == 200
    text = response.content.decode()
    assert PROMPT in text and 'id="playground-form"' in text
    assert '<label for="id_system_prompt">' in text and 'id="side-draft"' in text
    hub = client.get(reverse("monitoring:agent", args=[agent.slug])).content.decode()
    assert f'href="{page_url(agent)}"' in hub


def test_send_answers_with_both_runs(client, operator, agent):
    response = client.post(page_url(agent, "send"), _form(agent))
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["content"] == "Weather?"
    draft, live = Run.objects.get(pk=data["draft"]["run_id"]), Run.objects.get(pk=data["live"]["run_id"])
    assert draft.agent_version.playground and live.agent_version_id == agent.published_version_id
    assert data["draft"]["events_url"] == reverse("monitoring:run-events", args=[draft.pk])
    assert data["live"]["timeline_url"] == reverse("monitoring:run", args=[live.pk])
    # Their events and timeline are the run pages' own, open to the same operator.
    assert client.get(data["draft"]["events_url"]).json()["run"]["status"] == "queued"
    # The draft's timeline says its version is the playground's, not a numbered one.
    assert 'id="run-playground-version"' in client.get(data["draft"]["timeline_url"]).content.decode()
    assert 'id="run-playground-version"' not in client.get(data["live"]["timeline_url"]).content.decode()


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"model_config": 999999}, "Model config"),
        ({"content": "  "}, "Write a test message"),
        ({"system_prompt": "x" * 50_001}, "System prompt"),
        ({"past_run": "00000000-0000-0000-0000-000000000000"}, "recent runs"),
        ({"past_run": "not-a-uuid"}, "past run"),
        ({"max_iterations": 0}, "Max iterations"),
        ({"temperature": "hot"}, "Temperature"),
        ({"tool_choice": "tool", "tool_choice_name": "nope"}, "tool"),
    ],
)
def test_bad_input_is_a_400_with_a_message(client, operator, agent, changes, words):
    response = client.post(page_url(agent, "send"), _form(agent, **changes))
    assert response.status_code == 400, response.content
    assert words.lower() in response.json()["message"].lower()
    assert not Run.objects.filter(trigger=RunTrigger.PLAYGROUND).exists()


def test_the_workspaces_limits_hold_for_playground_messages(client, operator, agent):
    # A playground message is a person's, billed like the try page's: not exempt as a fork is.
    Workspace.objects.filter(pk=agent.workspace_id).update(max_runs_in_flight=2)
    assert client.post(page_url(agent, "send"), _form(agent)).status_code == 201
    response = client.post(page_url(agent, "send"), _form(agent))
    assert response.status_code == 429 and response["Retry-After"]
    assert response.json()["message"]
    # Both sides or neither: the refused message started no run.
    assert Run.objects.filter(trigger=RunTrigger.PLAYGROUND).count() == 2


def test_another_workspaces_objects_are_refused(client, operator, agent):
    bravo = Workspace.objects.create(name="Bravo", slug="bravo")
    their_config = ModelConfigFactory(workspace=bravo)
    their_tool = ToolDefinition.objects.create(workspace=bravo, name="bravo-tool", kind="python", python_callable="x")
    theirs = make_agent(name="Bravo agent", slug="bravo-agent", workspace=bravo, model_config=their_config)
    for action in ("", "send", "save", "eval"):
        method = client.get if not action else client.post
        assert method(page_url(theirs, action)).status_code == 404
    assert client.post(page_url(agent, "send"), _form(agent, model_config=their_config.pk)).status_code == 400
    assert client.post(page_url(agent, "send"), _form(agent, tools=[their_tool.pk])).status_code == 400
    # Another workspace's run is no past run of this agent.
    their_run = ledger_run(theirs, finished_at=timezone.now())
    response = client.post(page_url(agent, "send"), _form(agent, content="", past_run=str(their_run.pk)))
    assert response.status_code == 400


def test_permissions(client, agent):
    user = get_user_model().objects.create_user("try-only", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="conversations", codename__in=["view_run", "add_run"])
    )
    client.force_login(user)
    assert client.get(page_url(agent)).status_code == 403  # viewing the agent is needed too
    assert client.post(page_url(agent, "send"), _form(agent)).status_code == 403
    user.user_permissions.add(Permission.objects.get(content_type__app_label="agents", codename="view_agent"))
    client.force_login(get_user_model().objects.get(pk=user.pk))
    assert client.get(page_url(agent)).status_code == 200
    # Trying an edited draft is testing a version (agents.run_choices): a 403 that says so.
    refused = client.post(page_url(agent, "send"), _form(agent))
    assert refused.status_code == 403 and "test agent versions" in refused.json()["message"]
    assert not Run.objects.filter(trigger=RunTrigger.PLAYGROUND).exists()
    assert 'id="playground-save"' not in client.get(page_url(agent)).content.decode()
    assert client.post(page_url(agent, "save"), _form(agent)).status_code == 403
    assert client.post(page_url(agent, "eval"), _form(agent)).status_code == 403
    agent.refresh_from_db()
    assert agent.system_prompt == PROMPT
    client.logout()
    assert client.get(page_url(agent)).status_code == 302


def test_posts_need_the_csrf_token(operator, agent):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    for action in ("send", "save", "eval"):
        assert strict.post(page_url(agent, action), _form(agent)).status_code == 403
    assert not Run.objects.filter(trigger=RunTrigger.PLAYGROUND).exists()


def test_save_as_draft_is_audited_as_a_console_change(client, operator, agent):
    ConfigChange.objects.all().delete()
    response = client.post(page_url(agent, "save"), _form(agent, temperature="0.1"))
    assert response.status_code == 200, response.content
    assert response.json()["not_saved"] == ["temperature"]
    change = ConfigChange.objects.get(content_type__model="agent", object_id=str(agent.pk))
    assert change.source == "console" and change.actor == operator
    assert change.changes["system_prompt"] == [PROMPT, PROMPT + " Be brief."]
    agent.refresh_from_db()
    assert agent.system_prompt == PROMPT + " Be brief." and agent.published_version.number == 1


def test_eval_from_the_page(client, operator, agent):
    suite = EvalSuite.objects.create(name="Weather suite")
    EvalCase.objects.create(suite=suite, name="hello", turns=[{"role": "user", "content": "hello"}])
    response = client.post(page_url(agent, "eval"), _form(agent, suite=suite.pk))
    assert response.status_code == 201, response.content
    assert response.json()["url"] == reverse("admin:evals_evalrun_change", args=[response.json()["eval_run_id"]])
    bravo = Workspace.objects.create(name="Bravo", slug="bravo")
    theirs = EvalSuite.objects.create(name="Their suite", workspace=bravo)
    assert client.post(page_url(agent, "eval"), _form(agent, suite=theirs.pk)).status_code == 400


def _statements(client, agent) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(page_url(agent)).status_code == 200
    return len(queries)


def test_statement_count_does_not_grow_with_the_agent_s_history(client, operator, agent):
    ledger_run(agent, finished_at=timezone.now())
    _statements(client, agent)  # the published version is then known to the process (version_by_id)
    few = _statements(client, agent)
    for _ in range(25):
        source = ledger_run(agent, finished_at=timezone.now())
        Message.objects.create(conversation=source.conversation, order=1, role="user", content="hi", run=source)
    assert _statements(client, agent) == few
    assert few <= 25, few


def test_another_model_config_takes_the_permission_to_change_model_configs(agent, staff):
    """A config the agent never used bills another key: the rule of every way in that lets a
    caller choose a model (agents.run_choices), as for a fork."""
    other = ModelConfigFactory(workspace_id=agent.workspace_id)
    with pytest.raises(RunChoiceRefused, match="change model configs"):
        playground_send(agent=agent, user=staff, edits=_edits(agent, model_config=other), content="x")
    assert not Run.objects.filter(trigger=RunTrigger.PLAYGROUND).exists()
    staff.user_permissions.add(Permission.objects.get(content_type__app_label="agents", codename="change_modelconfig"))
    staff = get_user_model().objects.get(pk=staff.pk)
    pair = playground_send(agent=agent, user=staff, edits=_edits(agent, model_config=other), content="x")
    assert pair.draft.trigger == RunTrigger.PLAYGROUND
