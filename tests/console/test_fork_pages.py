"""Forks from the operator pages: a "Fork from here" form on each step of a run's timeline (for
those who may fork), each kind of change posted and turned into a fork, bad input refused with
the reason, and the fork's page beside its source with the differences marked."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console.monitoring.fork_comparison import fork_comparison
from conversations.models import ForkChange, LLMCall, Run, ToolInvocation
from engine.forks import ForkRequest, run_fork
from tests.support.ledger import ledger_run
from tests.support.llm import agent_on, fake_model
from tests.support.runs import advance, ask

pytestmark = pytest.mark.django_db

# Two echo steps, then an answer that repeats the last tool result and the user's message: an
# edited result or message shows in the answer.
SCRIPT = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "alpha"}}]},
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "beta"}}]},
                {"content": "got {last_tool_result} for {last_user_message}"},
            ],
        }
    ]
}


@pytest.fixture
def source(fake_llm, no_enqueue):
    run = ask(agent_on(fake_llm, SCRIPT), "hello")
    assert run.status == "completed", run.error
    assert run.iterations == 3
    return run


def _staff(client, *codenames: str, username: str = "forker"):
    user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="conversations", codename__in=["view_run", *codenames])
    )
    client.force_login(user)
    return user


@pytest.fixture
def forker(client):
    return _staff(client, "fork_run")


def _fork_url(run, step: int) -> str:
    return reverse("monitoring:run-fork", args=[run.pk, step])


def _step_one_call(run) -> ToolInvocation:
    return ToolInvocation.objects.get(run=run, llm_call__iteration=1, llm_call__purpose="step")


def test_a_fork_form_per_step_only_for_those_who_may_fork(client, source):
    _staff(client, username="viewer")
    page = client.get(reverse("monitoring:run", args=[source.pk])).content.decode()
    assert "fork-step-" not in page

    _staff(client, "fork_run")
    page = client.get(reverse("monitoring:run", args=[source.pk])).content.decode()
    for step in (1, 2, 3):
        assert f'id="fork-step-{step}"' in page
        assert f'action="{_fork_url(source, step)}"' in page
    assert 'id="fork-step-4"' not in page
    # The user message changes only from step 1; a step with no tool calls has no result to edit.
    assert page.count('value="user_message"') == 1
    assert page.count('value="tool_result"') == 2
    assert 'name="csrfmiddlewaretoken"' in page


def test_no_form_on_a_run_that_has_not_ended(client, fake_llm, forker):
    running = ledger_run(agent_on(fake_llm, SCRIPT), status="running", stop_reason="")
    page = client.get(reverse("monitoring:run", args=[running.pk])).content.decode()
    assert "fork-step-" not in page


def _change_posts(fake_llm, source) -> dict:
    other = fake_model(fake_llm, SCRIPT)
    return {
        ForkChange.NONE: (2, {"change": "none"}),
        ForkChange.VERSION: (2, {"change": "version", "version": "draft"}),
        ForkChange.MODEL: (2, {"change": "model", "model_config": other.pk}),
        ForkChange.TOOL_RESULT: (
            1,
            {"change": "tool_result", "tool_call_id": _step_one_call(source).tool_call_id, "result": "EDITED"},
        ),
        ForkChange.USER_MESSAGE: (1, {"change": "user_message", "message": "bonjour"}),
    }


@pytest.mark.parametrize("kind", list(ForkChange))
def test_each_change_posted_makes_a_fork_and_shows_it_beside_its_source(client, fake_llm, source, forker, kind):
    # Choosing the version or another model config takes its own permission (agents.run_choices).
    forker.user_permissions.add(*Permission.objects.filter(codename__in=["test_agent_version", "change_modelconfig"]))
    step, data = _change_posts(fake_llm, source)[kind]
    response = client.post(_fork_url(source, step), data)

    fork = Run.objects.get(forked_from=source)
    assert response.status_code == 302
    assert response.url == reverse("monitoring:run-compare", args=[fork.pk])
    assert fork.fork_step == step and fork.fork_change["kind"] == kind and fork.fork_change["by"] == "forker"
    fork = advance(fork)
    assert fork.status == "completed", fork.error
    page = client.get(response.url)
    assert page.status_code == 200
    assert f'data-kind="{kind}"' in page.content.decode()


def test_write_results_and_real_writes_reach_the_fork(client, source, forker):
    response = client.post(
        _fork_url(source, 2),
        {"change": "none", "write_results": json.dumps({"test-counter": "recorded"}), "real_writes": "on"},
    )
    assert response.status_code == 302
    fork = Run.objects.get(forked_from=source)
    assert fork.fork_change["write_results"] == {"test-counter": "recorded"} and fork.fork_change["real_writes"]
    assert fork.sandbox["results"]["test-counter"] == "recorded" and fork.sandbox["real_writes"] == "approval"


@pytest.mark.parametrize(
    ("step", "data", "message"),
    [
        (2, {"change": "version"}, "Choose the version the fork runs."),
        (2, {"change": "model"}, "Choose the model config the fork runs."),
        (1, {"change": "tool_result"}, "Choose the tool call whose result changes."),
        (1, {"change": "user_message", "message": "  "}, "Write the user message the fork starts from."),
        (2, {"change": "user_message", "message": "hi"}, "Select a valid choice."),
        (1, {"change": "tool_result", "tool_call_id": "call_nope", "result": "x"}, "Select a valid choice."),
        (2, {"change": "version", "version": "99"}, "Select a valid choice."),
        (2, {"change": "none", "write_results": "not json"}, "Write results must be JSON."),
        (2, {"change": "none", "write_results": '["a"]'}, "Write results must map tool names"),
        (2, {"change": "none", "write_results": "[" * 50_000}, "Write results must be JSON."),
        (2, {"change": "none", "write_results": '{"t": "\\u0000"}'}, "NUL characters"),
        (2, {"change": "nonsense"}, "Select a valid choice."),
        (9, {"change": "none"}, "step 9 does not exist"),
        (0, {"change": "none"}, "The step must be a whole number from 1."),
        (10**20, {"change": "none"}, "does not exist"),
    ],
)
def test_bad_input_shows_the_timeline_again_with_the_reason(client, source, forker, step, data, message):
    response = client.post(_fork_url(source, step), data)
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="fork-error"' in page and message in page
    assert not Run.objects.filter(forked_from=source).exists()


def test_a_run_that_has_not_ended_is_not_forked(client, fake_llm, forker):
    running = ledger_run(agent_on(fake_llm, SCRIPT), status="running", stop_reason="")
    response = client.post(_fork_url(running, 1), {"change": "none"})
    assert response.status_code == 400
    assert "Only a run that has ended can be forked" in response.content.decode()


def test_forking_needs_the_permission_and_the_agent(client, source):
    _staff(client, username="viewer")
    assert client.post(_fork_url(source, 1), {"change": "none"}).status_code == 403
    client.logout()
    assert client.post(_fork_url(source, 1), {"change": "none"}).status_code == 302  # to the login page

    # Allowed to fork, but the agent is restricted to a group the user is not in.
    source.agent.allowed_groups.add(Group.objects.create(name="team"))
    _staff(client, "fork_run")
    assert client.post(_fork_url(source, 1), {"change": "none"}).status_code == 403
    assert not Run.objects.filter(forked_from=source).exists()


def _fork(source, user, **request) -> Run:
    return advance(run_fork(source=source, request=ForkRequest(**request), user=user))


def test_an_edited_tool_result_is_marked_where_it_made_a_difference(client, source, forker):
    edited = ToolInvocation.objects.get(run=source, llm_call__iteration=2, llm_call__purpose="step")
    fork = _fork(
        source, forker, step=2, change=ForkChange.TOOL_RESULT, tool_call_id=edited.tool_call_id, result="EDITED"
    )
    assert fork.status == "completed", fork.error

    comparison = fork_comparison(fork)
    rows = {row["step"]: row for row in comparison["rows"]}
    assert sorted(rows) == [2, 3]
    # Step 2 is the source's (copied) but for the result; the answer after it repeats that result.
    assert rows[2]["differs"] == {"content": False, "tool_calls": False, "results": True, "any": True}
    assert rows[2]["fork"]["copied"] and rows[2]["fork"]["results"][0]["simulated"]
    assert rows[2]["fork"]["results"][0]["result"] == "EDITED"
    assert rows[3]["differs"] == {"content": True, "tool_calls": False, "results": False, "any": True}
    assert comparison["fork"]["answer"] == "got EDITED for hello" and comparison["answer_differs"]
    assert comparison["change"]["detail"].endswith("EDITED")

    page = client.get(reverse("monitoring:run-compare", args=[fork.pk])).content.decode()
    assert '<tr data-step="2" class="differs">' in page and '<tr data-step="3" class="differs">' in page
    assert 'class="part results differs"' in page and 'class="part content differs"' in page
    assert '<tr id="compare-answer" class="differs">' in page
    assert "≠ differs" in page and "Steps that differ: 2." in page and "The answers differ." in page


def test_a_fork_with_no_change_shows_no_difference(client, source, forker):
    fork = _fork(source, forker, step=2)
    assert fork.status == "completed", fork.error

    comparison = fork_comparison(fork)
    assert [row["step"] for row in comparison["rows"]] == [2, 3]
    assert not any(row["differs"]["any"] for row in comparison["rows"]) and not comparison["answer_differs"]
    # The fork's step 2 called the model again; its tool call got the recorded result.
    step2 = comparison["rows"][0]["fork"]
    assert not step2["copied"] and step2["tokens"] > 0 and step2["results"][0]["simulated"]

    page = client.get(reverse("monitoring:run-compare", args=[fork.pk])).content.decode()
    assert "No differences" in page and "≠ differs" not in page and 'class="differs"' not in page


def test_a_step_only_one_side_has_is_shown_empty_on_the_other(client, fake_llm, source, forker):
    # The other model answers at once: the fork has no step 3.
    quick = fake_model(fake_llm, {"scenarios": [{"match": ".", "steps": [{"content": "quick"}]}]})
    forker.user_permissions.add(Permission.objects.get(codename="change_modelconfig"))
    forker = get_user_model().objects.get(pk=forker.pk)  # a fresh object: no cached permissions
    fork = _fork(source, forker, step=2, change=ForkChange.MODEL, model_config_id=quick.pk)
    rows = {row["step"]: row for row in fork_comparison(fork)["rows"]}
    assert rows[3]["fork"]["present"] is False and rows[3]["differs"]["any"]
    page = client.get(reverse("monitoring:run-compare", args=[fork.pk])).content.decode()
    assert "(no such step in this run)" in page


def test_only_a_fork_has_a_comparison_page(client, source, forker):
    assert client.get(reverse("monitoring:run-compare", args=[source.pk])).status_code == 404


def test_the_timelines_link_a_fork_and_its_source(client, source, forker):
    fork = _fork(source, forker, step=2)
    page = client.get(reverse("monitoring:run", args=[fork.pk])).content.decode()
    assert f'href="{reverse("monitoring:run-compare", args=[fork.pk])}" id="compare-source"' in page
    page = client.get(reverse("monitoring:run", args=[source.pk])).content.decode()
    assert f'data-fork="{fork.pk}"' in page

    data = client.get(reverse("monitoring:run-json", args=[fork.pk])).json()
    assert data["run"]["forked_from"] == str(source.pk) and data["run"]["fork_step"] == 2
    assert data["run"]["fork_change"]["kind"] == "none" and data["run"]["forks"] == []
    copied = [step["copied"] for step in data["steps"] if step["kind"] == "llm_call"]
    assert copied == [True, False, False]
    assert [step["copied"] for step in data["steps"] if step["kind"] == "tool_invocation"] == [True, False]
    forks = client.get(reverse("monitoring:run-json", args=[source.pk])).json()["run"]["forks"]
    assert [(f["id"], f["fork_step"], f["change"], f["by"]) for f in forks] == [(str(fork.pk), 2, "none", "forker")]


def test_the_comparison_reads_in_a_fixed_number_of_queries(
    client, fake_llm, no_enqueue, forker, django_assert_max_num_queries
):
    def compared(texts: list[str]) -> tuple[int, Run]:
        script = {
            "scenarios": [
                {
                    "match": ".",
                    "steps": [
                        *({"tool_calls": [{"name": "test-echo", "arguments": {"text": t}}]} for t in texts),
                        {"content": "done"},
                    ],
                }
            ]
        }
        run = ask(agent_on(fake_llm, script), "hi")
        fork = _fork(run, forker, step=1)
        with CaptureQueriesContext(connection) as queries:
            fork_comparison(fork)
        return len(queries), fork

    small, _ = compared(["a"])
    large, fork = compared(["a", "b", "c"])
    assert small == large <= 7
    with django_assert_max_num_queries(15):
        assert client.get(reverse("monitoring:run-compare", args=[fork.pk])).status_code == 200
    assert LLMCall.objects.filter(run=fork, copied=False).count() == 4
