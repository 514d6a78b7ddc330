"""Retention: agents' policies purge old finished runs with every row, leaving a tombstone that
names who set the policy; idempotency keys and finished webhook deliveries expire; the sweep is
scheduled; the admin records who set a policy and shows tombstones read-only."""

import io
import json
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from conversations.models import (
    Approval,
    Conversation,
    LLMCall,
    Message,
    Run,
    RunEvent,
    RunLabel,
    RunPurge,
    RunRequest,
    ToolInvocation,
)
from conversations.retention import idempotency_keys_expire, runs_purge
from engine import tasks as engine_tasks
from engine.admission import message_submit
from engine.retention import retention_sweep
from memory.models import Memory, MemoryChange, MemoryUse
from notifications.models import Webhook, WebhookAttempt, WebhookDelivery
from notifications.retention import webhook_deliveries_expire
from tests.support.admin_forms import agent_admin_inlines
from tests.support.factories import make_agent
from tests.support.ledger_seed import ROWS_PER_RUN, ledger_seed

pytestmark = pytest.mark.django_db


@pytest.fixture
def policy_owner():
    return User.objects.create_user(username="compliance", password="pw", is_staff=True)


@pytest.fixture
def agent(policy_owner):
    agent = make_agent(slug="weather", retention_days=30)
    agent.retention_set_by = policy_owner
    agent.retention_set_at = timezone.now() - timedelta(days=3)
    agent.save()
    return agent


def _ago(days: float):
    return timezone.now() - timedelta(days=days)


def _delivery(run: Run, *, status: str, created_at=None) -> WebhookDelivery:
    webhook = Webhook.objects.filter(agent=run.agent).first() or Webhook.objects.create(
        agent=run.agent, url="https://hooks.example.com/in", secret="s"
    )
    event = RunEvent.objects.filter(run=run).order_by("seq").last()
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, run_event=event, event_type=event.type, payload={}, status=status, attempts=1
    )
    WebhookAttempt.objects.create(delivery=delivery, number=1, http_status=200)
    if created_at is not None:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(created_at=created_at)
    return delivery


def test_the_sweep_purges_old_finished_runs_with_all_their_rows_and_leaves_a_tombstone(agent, policy_owner):
    old = ledger_seed(agent, 5, created_at=_ago(40))
    recent = ledger_seed(agent, 2, created_at=_ago(10))
    # Old but still going: never deleted, and neither is an ended run of its conversation.
    (old_active,) = ledger_seed(agent, 1, created_at=_ago(40), status="running")
    (beside_active,) = ledger_seed(agent, 1, created_at=_ago(40))
    Run.objects.filter(pk=beside_active.pk).update(conversation=old_active.conversation)
    # Another agent keeps everything.
    (forever,) = ledger_seed(make_agent(slug="forever"), 1, created_at=_ago(400))
    _delivery(old[0], status="delivered", created_at=_ago(1))
    # A tag and a metadata pair: their lookup rows go with the run.
    RunLabel.objects.bulk_create([RunLabel(run=old[2], key="", value="vip"), RunLabel(run=old[2], key="k", value="v")])
    # A conversation whose summary was written by a model call of a purged run.
    (summarised,) = ledger_seed(agent, 1, created_at=_ago(5))
    Conversation.objects.filter(pk=summarised.conversation_id).update(
        context_summary="earlier turns", context_summary_call=LLMCall.objects.filter(run=old[1]).first()
    )
    Run.objects.filter(pk=old[1].pk).update(conversation=summarised.conversation)
    RunRequest.objects.filter(run=old[1]).update(conversation=summarised.conversation)
    for order, message in enumerate(Message.objects.filter(run=old[1]), start=10):
        Message.objects.filter(pk=message.pk).update(conversation=summarised.conversation, order=order)

    summary = retention_sweep()

    remaining = set(Run.objects.values_list("pk", flat=True))
    assert remaining == {r.pk for r in recent} | {old_active.pk, beside_active.pk, forever.pk, summarised.pk}
    for model in (LLMCall, ToolInvocation, Approval, RunEvent, RunRequest, RunLabel, Message):
        assert not model.objects.filter(run__in=[r.pk for r in old]).exists(), model
    assert not WebhookDelivery.objects.exists() and not WebhookAttempt.objects.exists()
    # The conversations left empty went too; the one still holding a run stays, its summary text kept.
    assert not Conversation.objects.filter(pk__in=[r.conversation_id for r in old if r != old[1]]).exists()
    conversation = Conversation.objects.get(pk=summarised.conversation_id)
    assert conversation.context_summary == "earlier turns" and conversation.context_summary_call is None

    tombstone = RunPurge.objects.get()
    assert tombstone.agent == agent and tombstone.agent_slug == "weather" and tombstone.retention_days == 30
    assert tombstone.policy_set_by == policy_owner and tombstone.policy_set_by_username == "compliance"
    assert tombstone.policy_set_at == agent.retention_set_at
    assert abs((tombstone.cutoff - _ago(30)).total_seconds()) < 60
    assert tombstone.counts == {
        "runs": 5,
        "run_requests": 5,
        "run_labels": 2,
        "messages": 10,
        "llm_calls": 5 * ROWS_PER_RUN["llm_calls"],
        "tool_invocations": 5 * ROWS_PER_RUN["tool_invocations"],
        "approvals": 5 * ROWS_PER_RUN["approvals"],
        "approval_grants": 0,
        "events": 5 * ROWS_PER_RUN["events"],
        "guardrail_triggers": 0,
        "webhook_deliveries": 1,
        "webhook_attempts": 1,
        "conversations": 4,
    }
    assert summary["purged"]["weather"]["runs"] == 5 and "forever" not in summary["purged"]
    # Nothing left to do: a second sweep writes no tombstone.
    assert retention_sweep()["purged"] == {}
    assert RunPurge.objects.count() == 1


def test_a_purge_in_small_batches_keeps_one_tombstone_with_the_sum(agent):
    ledger_seed(agent, 5, created_at=_ago(31))
    result = runs_purge(agent=agent, batch_size=2)
    assert not Run.objects.exists()
    tombstone = RunPurge.objects.get(pk=result.tombstone_id)
    assert tombstone.counts["runs"] == 5 and tombstone.counts["events"] == 15
    assert tombstone.finished_at is not None


def test_a_purge_goes_oldest_first_and_rests_between_batches(agent, monkeypatch):
    runs = [run for days in (40, 38, 36, 34, 32) for run in ledger_seed(agent, 1, created_at=_ago(days))]
    left_at_each_rest, rests = [], []

    def rest(seconds):
        rests.append(seconds)
        left_at_each_rest.append(set(Run.objects.values_list("pk", flat=True)))

    monkeypatch.setattr("conversations.retention.time.sleep", rest)
    runs_purge(agent=agent, batch_size=2, pause=1.0)
    assert not Run.objects.exists()
    # After each full batch (not after the last, short one): the oldest went first.
    assert left_at_each_rest == [{r.pk for r in runs[2:]}, {runs[4].pk}]
    assert all(seconds > 0 for seconds in rests)
    rests.clear()
    ledger_seed(agent, 5, created_at=_ago(31))
    runs_purge(agent=agent, batch_size=2, pause=0)
    assert rests == [] and not Run.objects.exists()


def test_rows_of_other_apps_that_point_at_purged_runs_go_or_stay_unlinked(agent):
    """Memories outlive the run they came from; a memory's use of a purged call goes with it.
    Their foreign keys are checked at commit, so a purge that forgot one failed whole
    (related_name "+" hides them from the model's reverse relations)."""
    (run,) = ledger_seed(agent, 1, created_at=_ago(31))
    call = run.llm_calls.first()
    message = Message.objects.create(conversation=run.conversation, run=run, llm_call=call, order=99, role="assistant")
    memory = Memory.objects.create(
        scope=f"agent:{agent.pk}",
        end_user="u1",
        kind="fact",
        statement="住在成都",
        source_run=run,
        source_message=message,
    )
    change = MemoryChange.objects.create(
        memory=memory, scope=memory.scope, end_user="u1", action="add", source="extraction", run=run, llm_call=call
    )
    MemoryUse.objects.create(llm_call=call, run=run, memory=memory, rank=1)

    assert runs_purge(agent=agent).counts["runs"] == 1
    memory.refresh_from_db()
    assert (memory.source_run, memory.source_message) == (None, None)
    change.refresh_from_db()
    assert (change.run, change.llm_call) == (None, None)
    assert not MemoryUse.objects.exists()


def test_a_purged_run_leaves_its_forks_unlinked_and_a_purged_fork_leaves_its_source(agent):
    """A fork outlives its source (Run.forked_from is SET_NULL); purging a fork touches nothing
    of its source."""
    source, kept = ledger_seed(agent, 2, created_at=_ago(31))
    (fork,) = ledger_seed(agent, 1, created_at=_ago(1))
    Run.objects.filter(pk=fork.pk).update(forked_from=source, fork_step=1)
    Run.objects.filter(pk=source.pk).update(forked_from=kept, fork_step=2)

    assert runs_purge(agent=agent).counts["runs"] == 2
    fork.refresh_from_db()
    assert fork.forked_from_id is None and fork.fork_step == 1
    assert not Run.objects.filter(pk__in=[source.pk, kept.pk]).exists()


def test_a_dry_run_counts_and_deletes_nothing(agent):
    ledger_seed(agent, 3, created_at=_ago(31))
    ledger_seed(agent, 2, created_at=_ago(1))
    out = io.StringIO()
    call_command("agentry_purge", "--dry-run", stdout=out)
    report = json.loads(out.getvalue())
    assert report["purged"]["weather"]["runs"] == 3
    assert report["purged"]["weather"]["llm_calls"] == 6
    assert Run.objects.count() == 5 and not RunPurge.objects.exists()
    out = io.StringIO()
    call_command("agentry_purge", stdout=out)
    assert json.loads(out.getvalue())["purged"]["weather"]["runs"] == 3
    assert Run.objects.count() == 2 and RunPurge.objects.count() == 1


def test_no_policy_keeps_runs_forever():
    agent = make_agent(slug="keeper")
    ledger_seed(agent, 2, created_at=_ago(3000))
    assert runs_purge(agent=agent).counts["runs"] == 0
    assert retention_sweep()["purged"] == {}
    assert Run.objects.count() == 2


def test_an_idempotency_key_expires_and_then_starts_a_new_run(agent, no_enqueue):
    conversation = Conversation.objects.create(agent=agent)
    first = message_submit(conversation=conversation, content="Weather?", idempotency_key="k-1").run
    Run.objects.filter(pk=first.pk).update(status="completed")
    # Within the window the key replays the run it made.
    assert message_submit(conversation=conversation, content="Weather?", idempotency_key="k-1").replayed
    RunRequest.objects.filter(run=first).update(created_at=_ago(2))
    (fresh,) = ledger_seed(agent, 1)
    RunRequest.objects.filter(run=fresh).update(idempotency_key="k-fresh")

    assert idempotency_keys_expire(hours=settings.AGENTRY_IDEMPOTENCY_KEY_HOURS) == 1

    request = RunRequest.objects.get(run=first)
    assert request.idempotency_key == "" and request.content == "Weather?"
    assert RunRequest.objects.get(run=fresh).idempotency_key == "k-fresh"
    again = message_submit(conversation=conversation, content="Weather?", idempotency_key="k-1")
    assert not again.replayed and again.run.pk != first.pk
    assert engine_tasks.idempotency_keys_expire_task() == 0


def test_finished_webhook_deliveries_expire_and_pending_ones_stay(agent):
    runs = ledger_seed(agent, 4)
    delivered_old = _delivery(runs[0], status="delivered", created_at=_ago(31))
    failed_old = _delivery(runs[1], status="failed", created_at=_ago(45))
    pending_old = _delivery(runs[2], status="pending", created_at=_ago(60))
    delivered_new = _delivery(runs[3], status="delivered", created_at=_ago(29))
    counts = webhook_deliveries_expire(days=settings.AGENTRY_WEBHOOK_DELIVERY_DAYS, batch_size=1)
    assert counts == {"webhook_deliveries": 2, "webhook_attempts": 2}
    assert set(WebhookDelivery.objects.values_list("pk", flat=True)) == {pending_old.pk, delivered_new.pk}
    assert not WebhookAttempt.objects.filter(delivery_id__in=[delivered_old.pk, failed_old.pk]).exists()
    assert Run.objects.count() == 4


def test_the_sweep_is_scheduled_daily_and_key_expiry_hourly_on_the_maintenance_queue():
    schedule = {entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert schedule[engine_tasks.retention_sweep_task.name] == 24 * 3600
    assert schedule[engine_tasks.idempotency_keys_expire_task.name] == 3600
    for task in (engine_tasks.retention_sweep_task, engine_tasks.idempotency_keys_expire_task):
        assert settings.CELERY_TASK_ROUTES[task.name]["queue"] == "maintenance"


# --- admin ------------------------------------------------------------------------------------


def _agent_form(agent, **changes) -> dict:
    data = {
        "name": agent.name,
        "slug": agent.slug,
        "description": "",
        "is_active": "on",
        "system_prompt": agent.system_prompt,
        "time_zone": "UTC",
        "language": "en",
        "model_config": agent.model_config_id,
        "max_iterations": 8,
        "max_same_tool_streak": 3,
        "tool_choice": "auto",
        "parallel_tool_calls": "on",
        "concurrent_messages": "reject",
        "retention_days": agent.retention_days or "",
        **agent_admin_inlines(),
    }
    data.update(changes)
    return data


def test_saving_a_retention_policy_records_who_set_it(client, agent):
    admin_user = User.objects.create_superuser(username="root", password="pw")
    client.force_login(admin_user)
    url = reverse("admin:agents_agent_change", args=[agent.pk])
    response = client.post(url, _agent_form(agent, retention_days="90"))
    assert response.status_code == 302, response.content.decode()[:2000]
    agent.refresh_from_db()
    assert agent.retention_days == 90 and agent.retention_set_by == admin_user
    assert (timezone.now() - agent.retention_set_at).total_seconds() < 60
    # Saving other fields leaves the record of who set the policy alone.
    set_at = agent.retention_set_at
    client.post(url, _agent_form(agent, description="now with a description"))
    agent.refresh_from_db()
    assert agent.retention_set_at == set_at


def test_without_the_delete_permission_the_retention_cannot_be_changed(client, agent, policy_owner):
    editor = User.objects.create_user(username="editor", password="pw", is_staff=True)
    editor.user_permissions.add(
        Permission.objects.get(codename="change_agent"), Permission.objects.get(codename="view_agent")
    )
    client.force_login(editor)
    url = reverse("admin:agents_agent_change", args=[agent.pk])
    response = client.post(url, _agent_form(agent, retention_days="1"))
    assert response.status_code == 302, response.content.decode()[:2000]
    agent.refresh_from_db()
    assert agent.retention_days == 30 and agent.retention_set_by == policy_owner


def test_tombstones_are_read_only_in_the_admin(client, agent):
    ledger_seed(agent, 1, created_at=_ago(31))
    tombstone = RunPurge.objects.get(pk=runs_purge(agent=agent).tombstone_id)
    client.force_login(User.objects.create_superuser(username="root", password="pw"))
    assert client.get(reverse("admin:conversations_runpurge_changelist")).status_code == 200
    page = client.get(reverse("admin:conversations_runpurge_change", args=[tombstone.pk]))
    assert page.status_code == 200 and b"compliance" in page.content and b'name="_save"' not in page.content
    assert client.get(reverse("admin:conversations_runpurge_add")).status_code == 403
    assert client.post(reverse("admin:conversations_runpurge_delete", args=[tombstone.pk])).status_code == 403
