"""From a bad answer to a test, end to end: a run through the real worker and the fake model
server answers wrongly, its end user rates it down, the review queue picks it up when the reviewer
opens it, the reviewer corrects the answer on the page and makes an eval case of it, and
`agentry_eval` plays the case on the old version (failing against the corrected answer) and on the
fixed one (passing)."""

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from agents.services import agent_version_current
from conversations.feedback import run_feedback_set
from conversations.models import Run
from conversations.services import conversation_create
from engine.admission import message_post
from evals.models import EvalCase, EvalResult, EvalSuite
from reviews.models import ReviewItem, ReviewLabel, ReviewQueue
from tests.support.factories import make_agent
from tests.support.llm import fake_model
from tests.support.waits import wait_for
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What is the capital of France?"
CORRECTED = "The capital of France is Paris."


def _script(answer: str) -> dict:
    return {
        "scenarios": [
            {
                "match": "capital",
                "steps": [
                    {"tool_calls": [{"name": "test-echo", "arguments": {"text": "capital of France"}}]},
                    {"content": answer},
                ],
            }
        ]
    }


def test_a_rated_down_run_becomes_a_case_that_agentry_eval_scores_against_the_correction(worker, fake_llm, client):
    agent = make_agent(tools=["test-echo"], model_config=fake_model(fake_llm, _script("It is Lyon.")))
    owner = User.objects.create_user("end-user-app", password="pw")
    run = message_post(conversation=conversation_create(agent=agent, owner=owner), content=QUESTION, user=owner)
    wait_for(lambda: Run.objects.get(pk=run.pk).is_terminal, timeout=60, message="the run to end")
    run.refresh_from_db()
    assert run.status == "completed", run.error
    run_feedback_set(run=run, rating=-1, comment="Lyon is not the capital", by=owner)

    queue = ReviewQueue.objects.create(name="thumbs down", agent=agent)
    suite = EvalSuite.objects.create(name="regressions")
    reviewer = User.objects.create_user("reviewer", password="pw")
    membership_set(user=reviewer, workspace=Workspace.objects.get(pk=default_workspace_id()), role=Role.BUILDER)
    client.force_login(reviewer)

    # Opening the queue fills it; "review next" hands the run to the reviewer.
    assert client.get(reverse("reviews:queue", args=[queue.pk])).status_code == 200
    item = ReviewItem.objects.get(queue=queue)
    assert (item.run_id, item.reason) == (run.pk, "negative_feedback")
    page = client.get(client.post(reverse("reviews:next", args=[queue.pk]))["Location"]).content.decode()
    assert "It is Lyon." in page and "Lyon is not the capital" in page

    saved = client.post(
        reverse("reviews:label", args=[item.pk]), {"verdict": "bad", "corrected_answer": CORRECTED, "then": "stay"}
    )
    assert saved.status_code == 302 and ReviewLabel.objects.get(item=item).corrected_answer == CORRECTED
    # The case form offers the correction and the run's tool calls.
    page = client.get(reverse("reviews:item", args=[item.pk])).content.decode()
    assert CORRECTED in page and "capital of France" in page
    made = client.post(
        reverse("reviews:case", args=[item.pk]),
        {"suite": suite.pk, "name": "capital", "corrected_answer": CORRECTED, "check": "auto"},
    )
    assert made.status_code == 302
    case = EvalCase.objects.get(suite=suite)
    assert (case.answer_equals, case.source_run_id) == (CORRECTED, run.pk)

    # The agent fixed: a new model that gives the corrected answer; the old version is the baseline.
    old = run.agent_version
    agent.model_config = fake_model(fake_llm, _script(CORRECTED))
    agent.save()
    fixed = agent_version_current(agent=agent)
    assert fixed.pk != old.pk
    call_command("agentry_eval", agent.slug, suite="regressions", version="current", against=str(old.number))

    results = {r.eval_run.agent_version_id: r for r in EvalResult.objects.filter(case=case).select_related("eval_run")}
    assert set(results) == {old.pk, fixed.pk}
    before, after = results[old.pk], results[fixed.pk]
    assert before.scored and before.passed is False
    assert {
        "kind": "answer_equals",
        "passed": False,
        "reason": f"a different answer from {CORRECTED!r}",
    } in before.checks
    assert after.scored and after.passed is True, after.checks
    assert {"kind": "answer_equals", "passed": True, "reason": "the same answer"} in after.checks
