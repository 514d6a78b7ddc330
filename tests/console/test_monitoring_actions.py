"""Operator actions on runs: requeue a stuck run, cancel, retry a failed run from its last good
step. Each is guarded, recorded as a RunEvent naming who did it, and enqueues after commit."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from conversations.models import LLMCall, Run, RunEvent, ToolInvocation
from engine.operations import RunActionRefused, run_cancel_by_operator, run_requeue, run_retry
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run
from tests.support.runs import advance, last_answer, start_run


@pytest.fixture
def operator(db):
    user = get_user_model().objects.create_user("oncall", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="conversations", codename__in=["view_run", "operate_run"])
    )
    return user


def _events(run, type_):
    return list(RunEvent.objects.filter(run=run, type=type_).order_by("seq").values_list("payload", flat=True))


def _stuck(agent, **fields):
    past = timezone.now() - timedelta(minutes=5)
    return ledger_run(
        agent,
        status="running",
        stop_reason="",
        lease_owner="gone-host:1:abc",
        lease_expires_at=past,
        created_at=past,
        **fields,
    )


@pytest.mark.django_db
def test_requeue_a_stuck_run_records_who_and_enqueues_after_commit(
    operator, no_enqueue, django_capture_on_commit_callbacks
):
    run = _stuck(make_agent())
    with django_capture_on_commit_callbacks(execute=True):
        run = run_requeue(run_id=run.pk, user=operator)

    assert run.status == "queued" and run.lease_owner == "" and run.lease_expires_at is None
    [event] = _events(run, "run.requeued")
    assert event["by"] == "oncall" and event["reason"] == "operator"
    assert event["previous_owner"] == "gone-host:1:abc" and event["previous_status"] == "running"
    assert no_enqueue == [str(run.pk)]


@pytest.mark.django_db
def test_requeue_and_retry_refuse_runs_they_do_not_apply_to(operator, no_enqueue, django_capture_on_commit_callbacks):
    done = ledger_run(make_agent(), finished_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RunActionRefused, match="this one is completed"):
            run_requeue(run_id=done.pk, user=operator)
        with pytest.raises(RunActionRefused, match="Only a failed run"):
            run_retry(run_id=done.pk, user=operator)
        with pytest.raises(RunActionRefused, match="already ended"):
            run_cancel_by_operator(run_id=done.pk, user=operator)
    done.refresh_from_db()
    assert done.status == "completed" and not RunEvent.objects.filter(run=done).exists() and no_enqueue == []


@pytest.mark.django_db
def test_cancel_ends_an_abandoned_run_now_and_asks_a_live_one_to_stop(operator, no_enqueue):
    agent = make_agent()
    abandoned = run_cancel_by_operator(run_id=_stuck(agent).pk, user=operator)
    assert (abandoned.status, abandoned.stop_reason) == ("cancelled", "cancelled")
    assert _events(abandoned, "run.cancel_requested")[0]["by"] == "oncall"
    assert _events(abandoned, "run.cancelled")

    held = ledger_run(
        agent,
        status="running",
        stop_reason="",
        lease_owner="live:1:x",
        lease_expires_at=timezone.now() + timedelta(seconds=30),
    )
    held = run_cancel_by_operator(run_id=held.pk, user=operator)
    # The worker holding it stops at its next step boundary (the engine checks the flag).
    assert held.status == "running" and held.cancel_requested
    assert _events(held, "run.cancel_requested")[0]["by"] == "oncall"


def test_retry_resumes_a_failed_run_from_its_last_good_step(scripted_agent, fake_llm, operator, no_enqueue):
    # Step 1 calls a tool; step 2 fails once with a 500 and the model config allows no retry.
    agent = scripted_agent(
        {
            "scenarios": [
                {
                    "match": ".",
                    "steps": [
                        {"tool_calls": [{"name": "test-echo", "arguments": {"text": "hi"}}]},
                        {"content": "echoed {last_tool_result}", "fault": {"status": 500, "times": 1}},
                    ],
                }
            ]
        },
        tools=["test-echo"],
        model_fields={"max_retries": 0},
    )
    run = advance(start_run(agent))
    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    model = LLMCall.objects.filter(run=run).first().model_name
    assert len(fake_llm.requests(model)) == 2

    run = run_retry(run_id=run.pk, user=operator)
    assert run.status == "queued" and run.error == "" and run.finished_at is None
    assert no_enqueue[-1] == str(run.pk)
    [retried] = _events(run, "run.retried")
    assert retried["by"] == "oncall" and retried["previous"]["stop_reason"] == "provider_error"
    assert "HTTP 500" in retried["previous"]["error"] and retried["resume_after"]["role"] == "tool"

    run = advance(run)
    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    assert last_answer(run) == "echoed hi"
    # The first model call and the tool call were not made again: only the failed step was.
    assert len(fake_llm.requests(model)) == 3
    assert ToolInvocation.objects.filter(run=run).count() == 1
    assert list(LLMCall.objects.filter(run=run).order_by("id").values_list("iteration", "attempt", "status")) == [
        (1, 1, "succeeded"),
        (2, 1, "failed"),
        (2, 2, "succeeded"),
    ]


def test_retry_is_refused_once_the_conversation_moved_on(scripted_agent, operator, no_enqueue):
    agent = scripted_agent(
        {"scenarios": [{"match": ".", "steps": [{"content": "x", "fault": {"status": 500}}]}]},
        model_fields={"max_retries": 0},
    )
    failed = advance(start_run(agent))
    assert failed.status == "failed"
    start_run(agent, "another question", conversation=failed.conversation)
    with pytest.raises(RunActionRefused, match="moved on"):
        run_retry(run_id=failed.pk, user=operator)
    assert Run.objects.get(pk=failed.pk).status == "failed"


@pytest.mark.django_db
def test_actions_are_posted_by_staff_only(client, operator, no_enqueue, django_capture_on_commit_callbacks):
    run = _stuck(make_agent())
    url = reverse("monitoring:run-action", args=[run.pk, "requeue"])

    outsider = get_user_model().objects.create_user("visitor", password="pw")
    client.force_login(outsider)
    assert client.post(url).status_code == 403
    assert Run.objects.get(pk=run.pk).status == "running"

    client.force_login(operator)
    assert client.get(url).status_code == 405
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {"next": reverse("monitoring:dashboard")})
    assert response.status_code == 302 and response["Location"] == reverse("monitoring:dashboard")
    assert Run.objects.get(pk=run.pk).status == "queued"

    # Refused actions come back as a message on the page, not an error.
    response = client.post(reverse("monitoring:run-action", args=[run.pk, "retry"]), follow=True)
    assert "Only a failed run can be retried" in response.content.decode()
    assert client.post(reverse("monitoring:run-action", args=[run.pk, "explode"])).status_code == 404


@pytest.mark.django_db
def test_admin_actions_apply_to_selected_runs(client, operator, no_enqueue, django_capture_on_commit_callbacks):
    operator.is_superuser = True
    operator.save()
    client.force_login(operator)
    agent = make_agent()
    stuck, done = _stuck(agent), ledger_run(agent, finished_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("admin:conversations_run_changelist"),
            {"action": "requeue_runs", "_selected_action": [stuck.pk, done.pk]},
            follow=True,
        )
    page = response.content.decode()
    assert "Requeued 1 run(s)." in page and "this one is completed" in page
    assert Run.objects.get(pk=stuck.pk).status == "queued" and no_enqueue == [str(stuck.pk)]
