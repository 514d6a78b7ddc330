"""The reviewer's pages: the queue list and page (filled on opening), "review next", the run to
review (conversation with attachments, steps, online scores, feedback, rubric), the label, the
eval case made of it; each gated by its permission, and nothing of another workspace shown."""

import uuid

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from conversations.models import Message, RunFeedback
from evals.models import EvalCase, EvalSuite
from reviews.models import ReviewItem, ReviewLabel, ReviewQueue
from tests.reviews.support import scored
from tests.support.llm import agent_on
from tests.support.runs import ask
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db

SCRIPT = {
    "scenarios": [
        {
            "match": "capital",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "capital of France"}}]},
                {"content": "The capital of France is Lyon."},
            ],
        }
    ],
    "fallback": {"content": "Hello."},
}
RUBRIC = [{"name": "tone", "choices": ["fine", "rude"]}]
IMAGE = {"type": "image", "media_type": "image/png", "name": "map.png", "size": 2048, "width": 8, "height": 8}
FILE = {"type": "file", "media_type": "application/pdf", "name": "atlas.pdf", "size": 4096}


def _reviewed_run(fake_llm, workspace=None, tag="alpha"):
    extra = {} if workspace is None else {"workspace": workspace, "model_fields": {"workspace": workspace}}
    agent = agent_on(fake_llm, SCRIPT, name=f"{tag}-agent", slug=f"{tag}-agent", **extra)
    run = ask(agent, "What is the capital of France?")
    assert run.status == "completed", run.error
    message = Message.objects.get(run=run, role="user")
    message.parts = [{**IMAGE, "attachment": str(uuid.uuid4())}, {**FILE, "attachment": str(uuid.uuid4())}]
    message.save(update_fields=["parts"])
    RunFeedback.objects.create(run=run, rating=-1, comment=f"{tag}: Lyon is wrong")
    scored(run, 0.1)
    queue = ReviewQueue.objects.create(
        name=f"{tag}-queue", agent=agent, rubric=RUBRIC, workspace=workspace or agent.workspace
    )
    return run, queue


def _member(client, role: str, workspace_id: int | None = None, name: str = "reviewer") -> User:
    user = User.objects.create_user(name, password="pw")
    membership_set(user=user, workspace=Workspace.objects.get(pk=workspace_id or default_workspace_id()), role=role)
    client.force_login(user)
    return user


def test_a_reviewer_opens_the_queue_reviews_the_run_and_corrects_it(client, fake_llm, no_enqueue):
    run, queue = _reviewed_run(fake_llm)
    user = _member(client, Role.OPERATOR)

    listing = client.get(reverse("reviews:queues")).content.decode()
    assert "alpha-queue" in listing
    page = client.get(reverse("reviews:queue", args=[queue.pk]))
    assert page.status_code == 200 and ReviewItem.objects.get(queue=queue).run_id == run.pk

    claimed = client.post(reverse("reviews:next", args=[queue.pk]))
    item = ReviewItem.objects.get(queue=queue)
    assert claimed.status_code == 302 and claimed["Location"] == reverse("reviews:item", args=[item.pk])
    assert (item.state, item.assigned_to) == ("assigned", user)

    body = client.get(claimed["Location"]).content.decode()
    for shown in (
        "What is the capital of France?",  # the conversation
        "The capital of France is Lyon.",
        'class="attachment-thumb"',  # the image as a thumbnail, the file as a chip
        "atlas.pdf",
        "test-echo",  # the steps
        "capital of France",
        "alpha: Lyon is wrong",  # the feedback
        'id="review-scores"',  # the online scores
        'name="label_0"',  # the rubric
        'id="review-form"',
    ):
        assert shown in body, shown
    # An operator may not add to eval suites: no case form.
    assert 'id="review-case-form"' not in body

    saved = client.post(
        reverse("reviews:label", args=[item.pk]),
        {"verdict": "bad", "label_0": "fine", "corrected_answer": "The capital of France is Paris.", "then": "next"},
    )
    assert saved.status_code == 302 and saved["Location"] == reverse("reviews:queue", args=[queue.pk])
    label = ReviewLabel.objects.get(item=item)
    assert (label.reviewer, label.verdict, label.labels) == (user, "bad", {"tone": "fine"})
    assert label.corrected_answer == "The capital of France is Paris."
    item.refresh_from_db()
    assert item.state == "done"
    assert "Paris" in client.get(reverse("reviews:item", args=[item.pk])).content.decode()


def test_a_bad_label_is_a_400_and_saves_nothing(client, fake_llm, no_enqueue):
    _run, queue = _reviewed_run(fake_llm)
    _member(client, Role.OPERATOR)
    client.get(reverse("reviews:queue", args=[queue.pk]))
    item = ReviewItem.objects.get(queue=queue)
    client.post(reverse("reviews:next", args=[queue.pk]))
    for data in ({"verdict": "meh"}, {"verdict": "bad", "label_0": "angry"}, {"verdict": "bad", "notes": "a\x00b"}):
        assert client.post(reverse("reviews:label", args=[item.pk]), data).status_code == 400
    assert not ReviewLabel.objects.exists()


def test_the_case_made_of_a_review_expects_the_corrected_answer(client, fake_llm, no_enqueue):
    run, queue = _reviewed_run(fake_llm)
    suite = EvalSuite.objects.create(name="regressions")
    _member(client, Role.BUILDER)
    client.get(reverse("reviews:queue", args=[queue.pk]))
    item = ReviewItem.objects.get(queue=queue)
    body = client.get(reverse("reviews:item", args=[item.pk])).content.decode()
    assert 'id="review-case-form"' in body and "regressions" in body

    url = reverse("reviews:case", args=[item.pk])
    assert client.post(url, {"suite": suite.pk, "name": "paris", "corrected_answer": ""}).status_code == 400
    made = client.post(
        url,
        {
            "suite": suite.pk,
            "name": "paris",
            "corrected_answer": "The capital of France is Paris.",
            "check": "auto",
            "expected_tool_calls": "",
        },
    )
    assert made.status_code == 302
    case = EvalCase.objects.get(suite=suite, name="paris")
    assert case.turns == [{"role": "user", "content": "What is the capital of France?"}]
    assert case.expected_tool_calls == [{"name": "test-echo", "arguments": {"text": "capital of France"}}]
    # The suite has no judge model: the exact text.
    assert (case.answer_equals, case.answer_rubric, case.source_run_id) == (
        "The capital of France is Paris.",
        "",
        run.pk,
    )

    # The reviewer's own expected calls, and a refused one.
    edited = client.post(
        url,
        {
            "suite": suite.pk,
            "name": "no-tool",
            "corrected_answer": "Paris",
            "check": "contains",
            "expected_tool_calls": "[]",
        },
    )
    assert edited.status_code == 302
    case = EvalCase.objects.get(suite=suite, name="no-tool")
    assert (case.expected_tool_calls, case.answer_contains) == ([], "Paris")
    refused = client.post(
        url,
        {"suite": suite.pk, "name": "x", "corrected_answer": "Paris", "check": "judge", "expected_tool_calls": "[1]"},
    )
    assert refused.status_code == 400 and not EvalCase.objects.filter(name="x").exists()


def test_each_page_asks_for_its_permission(client, fake_llm, no_enqueue):
    _run, queue = _reviewed_run(fake_llm)
    item = ReviewItem.objects.create(queue=queue, run_id=_run.pk, reason="sample")
    suite = EvalSuite.objects.create(name="s")
    assert client.get(reverse("reviews:queues")).status_code == 302  # to the sign-in page
    _member(client, Role.VIEWER, name="viewer")
    for url in (
        reverse("reviews:queues"),
        reverse("reviews:queue", args=[queue.pk]),
        reverse("reviews:item", args=[item.pk]),
    ):
        assert client.get(url).status_code == 403, url
    assert client.post(reverse("reviews:next", args=[queue.pk])).status_code == 403
    _member(client, Role.OPERATOR, name="operator")
    case = {"suite": suite.pk, "name": "c", "corrected_answer": "Paris", "check": "auto"}
    assert client.post(reverse("reviews:case", args=[item.pk]), case).status_code == 403
    assert not EvalCase.objects.exists() and not ReviewLabel.objects.exists()


def test_a_reviewer_of_alpha_sees_nothing_of_bravo(client, fake_llm, no_enqueue):
    _alpha_run, alpha = _reviewed_run(fake_llm)
    bravo_space = Workspace.objects.create(name="Bravo team", slug="bravo")
    bravo_run, bravo = _reviewed_run(fake_llm, workspace=bravo_space, tag="bravo")
    bravo_suite = EvalSuite.objects.create(name="bravo-suite", workspace=bravo_space)
    alpha_suite = EvalSuite.objects.create(name="alpha-suite")
    ReviewItem.objects.create(queue=bravo, run_id=bravo_run.pk, reason="sample")
    bravo_item = ReviewItem.objects.get(queue=bravo)
    _member(client, Role.OWNER)

    listing = client.get(reverse("reviews:queues")).content.decode()
    assert "alpha-queue" in listing and "bravo" not in listing
    assert client.get(reverse("reviews:queue", args=[bravo.pk])).status_code == 404
    assert client.post(reverse("reviews:next", args=[bravo.pk])).status_code == 404
    assert client.get(reverse("reviews:item", args=[bravo_item.pk])).status_code == 404
    label = {"verdict": "good"}
    assert client.post(reverse("reviews:label", args=[bravo_item.pk]), label).status_code == 404
    case = {"suite": alpha_suite.pk, "name": "c", "corrected_answer": "x", "check": "auto"}
    assert client.post(reverse("reviews:case", args=[bravo_item.pk]), case).status_code == 404
    assert client.post(reverse("reviews:release", args=[bravo_item.pk])).status_code == 404

    # Alpha's item: Bravo's suite is not a choice, and no page shows Bravo's names.
    client.get(reverse("reviews:queue", args=[alpha.pk]))
    alpha_item = ReviewItem.objects.get(queue=alpha)
    body = client.get(reverse("reviews:item", args=[alpha_item.pk])).content.decode()
    assert "bravo" not in body.lower()
    case = {"suite": bravo_suite.pk, "name": "c", "corrected_answer": "x", "check": "auto"}
    assert client.post(reverse("reviews:case", args=[alpha_item.pk]), case).status_code == 400
    assert not EvalCase.objects.exists()
    assert ReviewItem.objects.filter(queue=bravo, state="open").count() == 1


def test_the_queue_list_and_page_show_the_agreement_of_runs_reviewed_twice(client, fake_llm, no_enqueue):
    run, queue = _reviewed_run(fake_llm)
    queue.reviews_per_run = 2
    queue.save()
    other = ask(queue.agent, "What is the capital of France?")
    reviewer = _member(client, Role.OPERATOR)
    second = User.objects.create_user("second", password="pw")
    for run_id, verdicts in ((run.pk, ("bad", "bad")), (other.pk, ("bad", "good"))):
        item = ReviewItem.objects.create(queue=queue, run_id=run_id, reason="sample", state="done")
        for user, verdict in zip((reviewer, second), verdicts, strict=True):
            ReviewLabel.objects.create(item=item, reviewer=user, verdict=verdict)
    for url in (reverse("reviews:queues"), reverse("reviews:queue", args=[queue.pk])):
        body = client.get(url).content.decode()
        assert "50.0 % of 2 runs reviewed twice" in body and "κ 0.00" in body, url
