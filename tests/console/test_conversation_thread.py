"""A conversation's thread view: every run as one chat in order, tool calls folded with their
status and approval, each run's outcome and a link into its timeline; for staff with view_run in
the conversation's workspace only (another workspace's is a 404); paged by runs, so its
statement count does not grow with the conversation; linked from the run's timeline and the
conversation's admin pages."""

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agents.services import agent_version_current
from conversations.models import Approval, Conversation, LLMCall, Message, Run, RunRequest, ToolInvocation
from tests.support.factories import ModelConfigFactory, make_agent
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


def thread_url(conversation_id, **params) -> str:
    url = reverse("monitoring:conversation", args=[conversation_id])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")


def turn(conversation, *, question: str, answer: str, tools=(), **fields) -> Run:
    """A run of the conversation with its user message, its answer and its tool calls."""
    agent = conversation.agent
    run = Run.objects.create(
        conversation=conversation,
        agent=agent,
        agent_version=agent_version_current(agent=agent),
        status=fields.pop("status", "completed"),
        stop_reason=fields.pop("stop_reason", "final_answer"),
        **fields,
    )
    RunRequest.objects.create(run=run, conversation=conversation, content=question, content_hash="x")
    order = conversation.message_count
    Message.objects.create(conversation=conversation, run=run, order=order, role="user", content=question)
    model = agent.model_config
    call = LLMCall.objects.create(
        run=run, iteration=1, attempt=1, model_config=model, provider=model.provider, model_name=model.model, request={}
    )
    Message.objects.create(
        conversation=conversation, run=run, order=order + 1, role="assistant", content="", tool_calls=[{"id": "c"}]
    )
    for position, (name, status, approval) in enumerate(tools):
        invocation = ToolInvocation.objects.create(
            run=run,
            llm_call=call,
            tool_name=name,
            tool_call_id=f"call-{position}",
            status=status,
            idempotency_key=f"{run.pk}-{position}",
        )
        if approval:
            Approval.objects.create(invocation=invocation, run=run, status=approval, arguments={})
    Message.objects.create(conversation=conversation, run=run, order=order + 2, role="assistant", content=answer)
    Conversation.objects.filter(pk=conversation.pk).update(message_count=order + 3)
    conversation.message_count = order + 3
    return run


@pytest.fixture
def conversation():
    agent = make_agent(name="Thread agent", slug="thread-agent", tools=["test-counter"])
    return Conversation.objects.create(agent=agent, title="Trip planning", end_user="traveller-1")


def test_the_thread_shows_every_run_as_one_chat(client, staff, conversation):
    first = turn(
        conversation,
        question="Weather in Chengdu?",
        answer="Sunny, 24 °C.",
        tools=[("weather", "succeeded", None), ("test-counter", "succeeded", "approved")],
        total_tokens=321,
        cost=Decimal("0.0042"),
        tags=["vip"],
    )
    second = turn(conversation, question="And tomorrow?", answer="Rain.", status="failed", stop_reason="provider_error")
    page = client.get(thread_url(conversation.pk))
    assert page.status_code == 200
    text = page.content.decode()
    # In order: the first question, its answer, the second question, its answer.
    positions = [text.index(s) for s in ("Weather in Chengdu?", "Sunny, 24 °C.", "And tomorrow?", "Rain.")]
    assert positions == sorted(positions)
    assert "2 tool calls" in text and "<code>test-counter</code>" in text and "approval: Approved" in text
    assert "321 tokens" in text and "v1" in text and "Provider error" in text
    assert reverse("admin:conversations_run_changelist") + "?tag=vip" in text
    for run in (first, second):
        assert reverse("monitoring:run", args=[run.pk]) in text
    assert reverse("monitoring:agent", args=["thread-agent"]) in text


def test_a_long_conversation_is_paged_with_a_link_to_earlier_messages(client, staff, conversation, monkeypatch):
    monkeypatch.setattr("console.monitoring.thread.RUNS_PER_PAGE", 2)
    for n in range(5):
        turn(conversation, question=f"question {n}", answer=f"answer {n}")
    newest = client.get(thread_url(conversation.pk)).content.decode()
    assert "question 4" in newest and "question 3" in newest and "question 2" not in newest
    assert 'id="thread-earlier"' in newest and "?page=2" in newest
    oldest = client.get(thread_url(conversation.pk, page=3)).content.decode()
    assert "question 0" in oldest and "question 1" not in oldest and 'id="thread-earlier"' not in oldest


@pytest.mark.parametrize("page", ["0", "x", "99999999", "%ED%A0%80"])
def test_a_bad_page_is_a_400(client, staff, conversation, page):
    assert client.get(thread_url(conversation.pk, page=page)).status_code == 400


def test_another_workspace_s_conversation_is_a_404(client, staff, conversation):
    bravo = Workspace.objects.create(name="Bravo", slug="bravo")
    theirs_agent = make_agent(slug="bravo-agent", workspace=bravo, model_config=ModelConfigFactory(workspace=bravo))
    theirs = Conversation.objects.create(agent=theirs_agent)
    turn(theirs, question="secret question", answer="secret answer")
    response = client.get(thread_url(theirs.pk))
    assert response.status_code == 404
    assert client.get(thread_url("00000000-0000-0000-0000-000000000000")).status_code == 404


def test_it_needs_view_run(client, conversation):
    assert client.get(thread_url(conversation.pk)).status_code == 302  # to the login page
    someone = get_user_model().objects.create_user("staff-only", password="pw", is_staff=True)
    client.force_login(someone)
    assert client.get(thread_url(conversation.pk)).status_code == 403


def _statements(client, conversation) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(thread_url(conversation.pk)).status_code == 200
    return len(queries)


def test_its_statement_count_does_not_grow_with_the_conversation(client, staff, conversation):
    turn(conversation, question="q", answer="a", tools=[("weather", "succeeded", "approved")])
    few = _statements(client, conversation)
    for n in range(30):
        turn(conversation, question=f"q{n}", answer=f"a{n}", tools=[("weather", "succeeded", "approved")] * 3)
    many = _statements(client, conversation)
    assert many == few
    # Session and user, the workspace binding, the conversation, its runs, their messages and
    # their tool calls.
    assert many <= 10, many


def test_it_is_linked_from_the_timeline_and_the_conversation_admin(client, staff, conversation):
    run = turn(conversation, question="q", answer="a")
    url = thread_url(conversation.pk)
    assert url in client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    assert url in client.get(reverse("admin:conversations_conversation_changelist")).content.decode()
    assert (
        url in client.get(reverse("admin:conversations_conversation_change", args=[conversation.pk])).content.decode()
    )


def test_the_timeline_shows_the_run_s_tags_and_metadata_linked_to_the_filtered_list(client, staff, conversation):
    run = turn(conversation, question="q", answer="a", tags=["vip"], metadata={"customer": "acme corp"})
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    runs = reverse("admin:conversations_run_changelist")
    assert f'{runs}?tag=vip"' in page and f'{runs}?meta=customer%3Aacme%20corp"' in page
