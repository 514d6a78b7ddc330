"""POST /api/v1/runs/{id}/fork/: each kind of change through the API, driven in-process; who may
fork which run; bad bodies; and how runs and their steps show forks."""

import pytest
from django.contrib.auth.models import Group, Permission
from rest_framework.test import APIClient

from agents.models import Agent
from agents.releases import version_publish
from agents.services import agent_version_current
from api.runs import RunDetailSerializer
from conversations.models import Conversation, LLMCall, Message, Run, ToolInvocation
from conversations.services import conversation_create
from tests.security.privileges import user_with
from tests.support.api import client_for
from tests.support.llm import agent_on, fake_model
from tests.support.runs import advance, ask, last_answer, start_run

pytestmark = pytest.mark.django_db

# Step 1 reads (test-echo), step 2 writes (test-counter, no approval), step 3 answers with the
# write's result: what a fork changed shows in its answer.
SCRIPT = {
    "scenarios": [
        {
            "match": r"say (?P<w>\w+)",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "{w}"}}]},
                {"tool_calls": [{"name": "test-counter", "arguments": {"label": "fork-{w}"}}]},
                {"content": "said {w}: {last_tool_result}"},
            ],
        }
    ]
}
OTHER_MODEL = {"scenarios": [{"match": ".", "steps": [{"content": "another model's answer"}]}]}


@pytest.fixture
def forker():
    return user_with("conversations.fork_run", staff=False)


@pytest.fixture
def api(forker):
    return client_for(forker)


@pytest.fixture
def writing_agent(fake_llm):
    return agent_on(fake_llm, SCRIPT, tools=["test-echo", "test-counter"], approval={"test-counter": "never"})


@pytest.fixture
def source(writing_agent, forker, fake_llm, no_enqueue, executions):
    """A completed run of the forker's: echo, write, answer."""
    run = ask(writing_agent, "say yo", conversation_create(agent=writing_agent, owner=forker))
    assert run.status == "completed", run.error
    assert executions("fork-yo") == 1
    return run


def _fork(api, run, **body):
    return api.post(f"/api/v1/runs/{run.pk}/fork/", body, format="json")


def _forked(api, run, **body) -> Run:
    """The fork the API made, advanced in this process to its end (or its next wait)."""
    response = _fork(api, run, **body)
    assert response.status_code == 202, response.content
    return advance(Run.objects.get(pk=response.json()["id"]))


def _grant(user, *names: str) -> None:
    for name in names:
        app_label, codename = name.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))


def _error(response, status: int) -> str:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"message", "extra"}
    return body["message"]


# --- each kind of change --------------------------------------------------------------------------


def test_a_replay_copies_the_steps_before_and_gives_the_write_its_recorded_result(api, source, executions):
    fork = _forked(api, source, step=2)
    assert fork.status == "completed", fork.error
    assert last_answer(fork) == last_answer(source)
    assert executions("fork-yo") == 1  # the write was not made again
    assert list(LLMCall.objects.filter(run=fork).order_by("iteration").values_list("iteration", "copied")) == [
        (1, True),
        (2, False),
        (3, False),
    ]
    calls = ToolInvocation.objects.filter(run=fork).order_by("created_at")
    assert [(c.tool_name, c.copied, c.simulated) for c in calls] == [
        ("test-echo", True, False),
        ("test-counter", False, True),
    ]
    steps = api.get(f"/api/v1/runs/{fork.pk}/steps/").json()["results"]
    assert [(s["kind"], s["copied"]) for s in steps] == [
        ("llm_call", True),
        ("tool_invocation", True),
        ("llm_call", False),
        ("tool_invocation", False),
        ("llm_call", False),
    ]


def test_another_version_runs_from_the_fork_point(api, source, writing_agent, fake_llm, forker):
    _grant(forker, "agents.test_agent_version")
    Agent.objects.filter(pk=writing_agent.pk).update(model_config=fake_model(fake_llm, OTHER_MODEL))
    assert agent_version_current(agent=Agent.objects.get(pk=writing_agent.pk)).number == 2  # the draft
    for version in (2, "2", "draft"):
        fork = _forked(api, source, step=2, change="version", version=version)
        assert fork.status == "completed", fork.error
        assert fork.agent_version.number == 2
        assert last_answer(fork) == "another model's answer"
        assert fork.fork_change["version"] == 2


def test_another_model_config_answers_from_the_fork_point(api, source, fake_llm, forker):
    _grant(forker, "agents.change_modelconfig")
    other = fake_model(fake_llm, OTHER_MODEL)
    fork = _forked(api, source, step=2, change="model", model_config=other.pk)
    assert fork.status == "completed", fork.error
    assert last_answer(fork) == "another model's answer"
    assert list(LLMCall.objects.filter(run=fork, copied=False).values_list("model_name", flat=True)) == [other.model]
    assert fork.fork_change["model_config_id"] == other.pk


def test_an_edited_tool_result_is_what_the_model_reads_next(api, source, executions):
    write = ToolInvocation.objects.get(run=source, tool_name="test-counter")
    fork = _forked(api, source, step=2, change="tool_result", tool_call_id=write.tool_call_id, result="FAILED: full")
    assert fork.status == "completed", fork.error
    assert last_answer(fork) == "said yo: FAILED: full"
    edited = ToolInvocation.objects.get(run=fork, tool_name="test-counter")
    assert (edited.result, edited.copied, edited.simulated) == ("FAILED: full", True, True)
    assert executions("fork-yo") == 1


def test_an_edited_user_message_gets_write_results_and_never_writes(api, source, executions):
    fork = _forked(
        api, source, step=1, change="user_message", message="say hi", write_results={"test-counter": "stubbed"}
    )
    assert fork.status == "completed", fork.error
    assert last_answer(fork) == "said hi: stubbed"
    assert Message.objects.filter(run=fork, role="user").get().content == "say hi"
    assert executions("fork-hi") == 0
    # Without a result for the write, its call fails without running.
    fork = _forked(api, source, step=1, change="user_message", message="say ho")
    assert fork.status == "completed", fork.error
    assert ToolInvocation.objects.get(run=fork, tool_name="test-counter").error == "not run in a fork"
    assert executions("fork-ho") == 0


def test_real_writes_wait_for_an_approval(api, source, executions):
    fork = _forked(api, source, step=1, change="user_message", message="say hey", real_writes=True)
    assert fork.status == "awaiting_approval"
    assert fork.fork_change["real_writes"] is True
    assert executions("fork-hey") == 0


# --- the answer, and how runs show forks -----------------------------------------------------------


def test_the_202_is_the_fork_as_the_run_detail_shows_it(
    api, source, forker, no_enqueue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = _fork(api, source, step=2)
    assert response.status_code == 202, response.content
    body = response.json()
    assert set(body) == set(RunDetailSerializer.Meta.fields)
    assert body["status"] == "queued" and [str(pk) for pk in no_enqueue] == [body["id"]]
    assert body["forked_from"] == str(source.pk) and body["fork_step"] == 2
    assert body["fork_change"] == {"kind": "none", "real_writes": False, "by": forker.username}
    assert body["input"] == "say yo" and body["conversation"] != str(source.conversation_id)
    assert body["agent_version"] == source.agent_version.number and body["forks"] == []
    assert api.get(f"/api/v1/runs/{body['id']}/").json() == body


def test_a_run_lists_its_forks_newest_first_and_the_list_shows_where_forks_came_from(api, source):
    first = _fork(api, source, step=1).json()["id"]
    second = _fork(api, source, step=2).json()["id"]
    detail = api.get(f"/api/v1/runs/{source.pk}/").json()
    assert detail["forks"] == [second, first]
    assert detail["forked_from"] is None and detail["fork_step"] is None and detail["fork_change"] is None
    listed = {run["id"]: run for run in api.get("/api/v1/runs/").json()["results"]}
    assert listed[first]["forked_from"] == str(source.pk) and listed[first]["fork_step"] == 1
    assert "by_id" not in listed[first]["fork_change"] and "forks" not in listed[first]


def test_the_list_leaves_large_texts_to_the_run_itself(api, source, forker):
    """A list page holds many runs: an edited result, an edited message or write results (each up
    to 100,000 characters) are the run's page's, not the list's."""
    write = ToolInvocation.objects.get(run=source, tool_name="test-counter")
    edited = _fork(
        api,
        source,
        step=2,
        change="tool_result",
        tool_call_id=write.tool_call_id,
        result="R" * 100_000,
        write_results={"test-counter": "W" * 100_000},
    ).json()["id"]
    retold = _fork(api, source, step=1, change="user_message", message="say " + "m" * 99_000).json()["id"]

    response = api.get("/api/v1/runs/")
    listed = {run["id"]: run for run in response.json()["results"]}
    assert len(response.content) < 20_000
    assert listed[edited]["fork_change"] == {
        "kind": "tool_result",
        "tool_call_id": write.tool_call_id,
        "real_writes": False,
        "by": forker.username,
    }
    assert listed[retold]["fork_change"] == {"kind": "user_message", "real_writes": False, "by": forker.username}
    assert len(listed[retold]["input"]) == 500 and listed[retold]["input"].endswith("…")
    assert listed[str(source.pk)]["input"] == "say yo"  # a short text is whole

    detail = api.get(f"/api/v1/runs/{edited}/").json()
    assert detail["fork_change"]["result"] == "R" * 100_000
    assert detail["fork_change"]["write_results"] == {"test-counter": "W" * 100_000}
    assert api.get(f"/api/v1/runs/{retold}/").json()["input"] == "say " + "m" * 99_000


def test_another_users_forks_are_not_listed(source, api):
    other = user_with("conversations.fork_run", "conversations.view_run")  # staff: sees every run
    theirs = _fork(client_for(other), source, step=1).json()["id"]
    assert api.get(f"/api/v1/runs/{source.pk}/").json()["forks"] == []
    assert client_for(other).get(f"/api/v1/runs/{source.pk}/").json()["forks"] == [theirs]


# --- who may fork ------------------------------------------------------------------------------------


def test_without_the_permission_it_is_a_403(source):
    owner_without = user_with(staff=False)
    Conversation.objects.filter(pk=source.conversation_id).update(owner=owner_without)
    assert "permission to fork" in _error(_fork(client_for(owner_without), source, step=1), 403)
    assert Run.objects.filter(forked_from=source).count() == 0


def test_a_run_the_caller_cannot_see_is_a_404(source):
    stranger = user_with("conversations.fork_run", staff=False)
    _error(_fork(client_for(stranger), source, step=1), 404)
    _error(_fork(client_for(stranger), Run(pk="00000000-0000-0000-0000-000000000000"), step=1), 404)


def test_an_agent_the_caller_may_not_use_is_a_403(source, writing_agent):
    writing_agent.allowed_groups.set([Group.objects.create(name="finance")])
    staff = user_with("conversations.fork_run", "conversations.view_run")
    assert "agent" in _error(_fork(client_for(staff), source, step=1), 403)
    assert Run.objects.filter(forked_from=source).count() == 0


def test_a_session_needs_the_permission_too(source, forker):
    client = APIClient()
    client.force_login(forker)
    assert _fork(client, source, step=1).status_code == 202
    client.force_login(user_with(staff=True))
    _error(_fork(client, source, step=1), 403)


def test_choosing_a_version_takes_the_permission_a_posted_message_asks(api, source, writing_agent, forker):
    """The messages API's rule (agents.run_choices): a user who may fork but not test versions
    cannot run the draft through a fork either."""
    Agent.objects.filter(pk=writing_agent.pk).update(system_prompt="An unpublished prompt.")
    for version in ("draft", "published", str(source.agent_version.number)):
        refused = _error(_fork(api, source, step=2, change="version", version=version), 403)
        assert refused == "Choosing the version to run takes the permission to test agent versions."
    posted = api.post(
        f"/api/v1/conversations/{source.conversation_id}/messages/",
        {"content": "say hi", "version": "draft"},
        format="json",
    )
    assert _error(posted, 403) == refused
    assert Run.objects.filter(forked_from=source).count() == 0

    _grant(forker, "agents.test_agent_version")
    fork = _forked(api, source, step=2, change="version", version="draft")
    assert fork.status == "completed", fork.error
    assert fork.agent_version.snapshot["agent"]["system_prompt"] == "An unpublished prompt."


def test_a_run_of_a_version_never_published_is_forked_only_with_the_permission(api, source, writing_agent):
    """A fork that names no version runs its source's: one that never served live traffic (a
    tester's draft run) is a version chosen all the same."""
    version_publish(agent=writing_agent, user=user_with(superuser=True), note="Live.")
    Agent.objects.filter(pk=writing_agent.pk).update(system_prompt="A draft.")
    draft = agent_version_current(agent=Agent.objects.get(pk=writing_agent.pk))
    assert draft.published_at is None
    Run.objects.filter(pk=source.pk).update(agent_version=draft)
    assert "never published" in _error(_fork(api, source, step=2), 403)
    assert Run.objects.filter(forked_from=source).count() == 0

    # A version that served live traffic is forked freely.
    Run.objects.filter(pk=source.pk).update(agent_version=Agent.objects.get(pk=writing_agent.pk).published_version)
    assert _fork(api, source, step=2).status_code == 202


def test_a_model_config_the_agent_does_not_use_takes_the_permission(api, source, writing_agent, forker, fake_llm):
    other = fake_model(fake_llm, OTHER_MODEL)
    refused = _error(_fork(api, source, step=2, change="model", model_config=other.pk), 403)
    assert "permission to change model configs" in refused and other.name in refused
    assert Run.objects.filter(forked_from=source).count() == 0

    # The agent's fallback is a config it uses: trying the run on it needs nothing more.
    Agent.objects.filter(pk=writing_agent.pk).update(fallback_model_config=other)
    fork = _forked(api, source, step=2, change="model", model_config=other.pk)
    assert fork.status == "completed" and last_answer(fork) == "another model's answer"

    Agent.objects.filter(pk=writing_agent.pk).update(fallback_model_config=None)
    assert _fork(api, source, step=2, change="model", model_config=other.pk).status_code == 403
    _grant(forker, "agents.change_modelconfig")
    assert _fork(api, source, step=2, change="model", model_config=other.pk).status_code == 202


# --- bad requests ------------------------------------------------------------------------------------


def test_a_run_that_has_not_ended_is_a_400(api, writing_agent, forker, no_enqueue):
    running = start_run(writing_agent, "say yo", conversation_create(agent=writing_agent, owner=forker))
    assert "has ended" in _error(_fork(api, running, step=1), 400)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "step"),
        ({"step": 0}, "step"),
        ({"step": "two"}, "step"),
        ({"step": True}, "step"),
        ({"step": 1.5}, "step"),
        ({"step": 2**31}, "step"),
        ({"step": 1, "change": "everything"}, "change"),
        ({"step": 1, "change": "version"}, "version"),
        ({"step": 1, "change": "version", "version": "latest"}, "version"),
        ({"step": 1, "change": "version", "version": "-1"}, "version"),
        ({"step": 1, "change": "version", "version": True}, "version"),
        ({"step": 1, "change": "model"}, "model_config"),
        ({"step": 1, "change": "model", "model_config": "gpt"}, "model_config"),
        ({"step": 1, "change": "tool_result", "result": "x"}, "tool_call_id"),
        ({"step": 1, "change": "tool_result", "tool_call_id": "call_1"}, "result"),
        ({"step": 1, "change": "tool_result", "tool_call_id": "", "result": "x"}, "tool_call_id"),
        ({"step": 1, "change": "tool_result", "tool_call_id": "c" * 129, "result": "x"}, "tool_call_id"),
        ({"step": 1, "change": "tool_result", "tool_call_id": "c", "result": "x" * 100_001}, "result"),
        ({"step": 1, "change": "user_message"}, "message"),
        ({"step": 1, "change": "user_message", "message": ""}, "message"),
        ({"step": 1, "change": "user_message", "message": "x" * 100_001}, "message"),
        ({"step": 1, "change": "user_message", "message": "a\x00b"}, "message"),
        ({"step": 1, "message": "say hi"}, "message"),  # a change's field without its change
        ({"step": 1, "change": "model", "version": "draft", "model_config": 1}, "version"),
        ({"step": 1, "write_results": ["test-counter"]}, "write_results"),
        ({"step": 1, "write_results": {"test-counter": ["a"]}}, "write_results"),
        ({"step": 1, "write_results": {f"tool-{i}": "x" for i in range(51)}}, "write_results"),
        ({"step": 1, "write_results": {"test-counter": "x" * 100_001}}, "write_results"),
        ({"step": 1, "write_results": {"": "x"}}, "write_results"),
        ({"step": 1, "real_writes": "perhaps"}, "real_writes"),
    ],
)
def test_bad_bodies_are_a_400_naming_the_field(api, source, body, field):
    assert _error(_fork(api, source, **body), 400).startswith(f"{field}: ")
    assert Run.objects.filter(forked_from=source).count() == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"step": 4}, "step 4 does not exist"),
        ({"step": 2, "change": "version", "version": "99"}, "no version 99"),
        ({"step": 2, "change": "version", "version": "published"}, "never been published"),
        ({"step": 2, "change": "user_message", "message": "say hi"}, "step 1"),
        ({"step": 1, "change": "user_message", "message": "   "}, "empty"),
        ({"step": 1, "change": "tool_result", "tool_call_id": "call_nope", "result": "x"}, "no tool call"),
    ],
)
def test_forks_that_cannot_be_made_are_a_400_saying_why(api, source, forker, body, message):
    _grant(forker, "agents.test_agent_version")  # a version may be named: what is wrong is the rest
    assert message in _error(_fork(api, source, **body), 400)
    assert Run.objects.filter(forked_from=source).count() == 0


def test_an_unknown_model_config_is_a_400(api, source):
    # A model config has no active flag (engine.forks): any that exists may be tried, by those allowed.
    assert "no model config 1000000000" in _error(_fork(api, source, step=2, change="model", model_config=10**9), 400)


def test_a_tool_call_id_of_another_step_is_a_400(api, source):
    echo = ToolInvocation.objects.get(run=source, tool_name="test-echo")  # step 1's
    body = {"step": 2, "change": "tool_result", "tool_call_id": echo.tool_call_id, "result": "x"}
    assert "Step 2 made no tool call" in _error(_fork(api, source, **body), 400)
