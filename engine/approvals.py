"""Decisions on approvals, their expiry, and resuming a run once nothing of its step is pending.

Every decision locks the run's row first and the approval's row second, as run_finish and
run_park_for_approval do, so a decision, an expiry, a cancellation and the parking of the same
run queue up behind each other instead of deadlocking or interleaving. The approval's status is
checked under that lock and guarded again in the UPDATE: of two deciders, exactly one wins.

An escalation takes the same two locks in the same order, but skips rows another transaction
holds (the next beat finds the approval again if it is still pending), and is guarded by
Approval.escalated_at: of two passes at once, exactly one tells the escalation channels.
"""

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents.models import Agent
from agents.snapshot import ToolSpec, snapshot_parse, snapshot_tool
from conversations import events
from conversations.batch import run_event_append
from conversations.events import EventType
from conversations.models import Approval, ApprovalGrant, Run, RunStatus, StopReason
from conversations.permissions import user_may_decide
from engine.dispatch import run_enqueue
from engine.runs import run_finish
from engine.speech import agent_says
from engine.transitions import run_transition
from tools.approval_policy import ApprovalExpiry
from tools.arguments import arguments_hash, contains_nul, validate_arguments

log = logging.getLogger(__name__)

APPROVE, REJECT = "approve", "reject"
# A hand-off's answer becomes a tool result; the API's reason field has the same limit.
HANDOFF_ANSWER_CHARS = 2000

EXPIRED_RUN_MESSAGE = _(
    "I stopped here: calling {tool} needed a person's approval and nobody decided within the time "
    "allowed, so nothing was done. Ask again when someone can approve it."
)


class ApprovalError(Exception):
    """A decision that cannot be taken; the message says why, in words for the person."""


class ApprovalNotAllowed(ApprovalError):
    pass


class ApprovalConflict(ApprovalError):
    """The approval is no longer pending (decided, expired, cancelled) or has changed."""


class ApprovalInvalid(ApprovalError):
    def __init__(self, message, errors: list[str] | None = None):
        super().__init__(message)
        self.errors = errors or [str(message)]


def _tool_spec(run: Run, tool_name: str) -> ToolSpec | None:
    return snapshot_tool(snapshot_parse(run.agent_version.snapshot), tool_name)


def _settle(
    *,
    approval: Approval,
    status: str,
    now,
    user=None,
    channel: str,
    reason: str = "",
    arguments: dict | None = None,
    for_rest_of_run: bool = False,
) -> None:
    """Record one decision on a pending approval (already locked) and its event."""
    fields = {"status": status, "decided_by": user, "decided_at": now, "channel": channel, "reason": reason}
    if arguments is not None:
        fields.update(arguments=arguments, arguments_hash=arguments_hash(arguments))
    if not Approval.objects.filter(pk=approval.pk, status=Approval.Status.PENDING).update(**fields):
        raise ApprovalConflict(_("This approval was decided by someone else a moment ago."))
    for field, value in fields.items():
        setattr(approval, field, value)
    invocation = approval.invocation
    event = EventType.APPROVAL_EXPIRED if status == Approval.Status.EXPIRED else EventType.APPROVAL_DECIDED
    run_event_append(
        run_id=approval.run_id,
        type=event,
        payload=events.approval_decided(
            approval_id=approval.pk,
            tool_invocation_id=invocation.pk,
            tool_call_id=approval.tool_call_id,
            tool=invocation.tool_name,
            status=status,
            channel=channel,
            decided_by=user.get_username() if user else None,
            reason=reason,
            edited=approval.arguments_hash != arguments_hash(invocation.arguments or {}),
            arguments_hash=approval.arguments_hash,
            for_rest_of_run=for_rest_of_run,
        ),
    )


def _resume_if_settled(run: Run) -> bool:
    """Requeue a parked run (locked by the caller) once none of its approvals is pending."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        return False
    if Approval.objects.filter(run_id=run.pk, status=Approval.Status.PENDING).exists():
        return False
    if not run_transition(
        run_id=run.pk,
        to=RunStatus.QUEUED,
        expect=[RunStatus.AWAITING_APPROVAL],
        payload=events.run_queued(reason="approvals decided"),
    ):
        return False
    run_enqueue(run_id=run.pk)
    return True


def _lock(approval_id) -> tuple[Run, Approval]:
    run_id = Approval.objects.filter(pk=approval_id).values_list("run_id", flat=True).first()
    if run_id is None:
        raise Approval.DoesNotExist(f"approval {approval_id} does not exist")
    run = Run.objects.select_for_update().select_related("agent_version").get(pk=run_id)
    approval = Approval.objects.select_for_update().select_related("invocation").get(pk=approval_id)
    return run, approval


def approval_decide(
    *,
    approval_id,
    user,
    decision: str,
    channel: str,
    arguments: dict | None = None,
    reason: str = "",
    for_rest_of_run: bool = False,
    expected_hash: str = "",
) -> Approval:
    """Approve (as asked, or with edited arguments) or reject one pending approval. A hand-off
    (Approval.Kind.HANDOFF) is approved with the person's answer as `reason`, which must not be empty.

    `expected_hash` binds the decision to the arguments the person saw; `for_rest_of_run`
    approves this call and every other call of the same tool in the same run, now and later.
    """
    if not user_may_decide(user):
        raise ApprovalNotAllowed(_("You are not allowed to decide approvals."))
    if decision not in (APPROVE, REJECT):
        raise ApprovalInvalid(_("Unknown decision %(decision)r; use 'approve' or 'reject'.") % {"decision": decision})
    if decision == REJECT and (arguments is not None or for_rest_of_run):
        raise ApprovalInvalid(_("Edited arguments and 'for the rest of the run' go with approve, not reject."))
    if contains_nul(arguments) or contains_nul(reason):
        raise ApprovalInvalid(_("The arguments and the reason must not contain the NUL character (U+0000)."))
    reason = (reason or "").strip()
    with transaction.atomic():
        run, approval = _lock(approval_id)
        now = timezone.now()
        if approval.status != Approval.Status.PENDING:
            if approval.decided_by:
                raise ApprovalConflict(
                    _("This approval is already %(status)s (by %(user)s).")
                    % {"status": approval.status, "user": approval.decided_by.get_username()}
                )
            raise ApprovalConflict(_("This approval is already %(status)s.") % {"status": approval.status})
        if approval.expires_at and approval.expires_at <= now:
            raise ApprovalConflict(_("This approval expired before the decision; it can no longer be decided."))
        if approval.kind == Approval.Kind.HANDOFF and decision == APPROVE:
            # A hand-off is approved with the person's answer, which becomes the tool's result.
            if arguments is not None or for_rest_of_run:
                raise ApprovalInvalid(_("A hand-off is answered with a text, not with arguments."))
            if not reason:
                raise ApprovalInvalid(_("Write the answer the agent should give."))
            if len(reason) > HANDOFF_ANSWER_CHARS:
                raise ApprovalInvalid(
                    _("The answer is too long (at most %(n)s characters).") % {"n": HANDOFF_ANSWER_CHARS}
                )
        if expected_hash and expected_hash != approval.arguments_hash:
            raise ApprovalConflict(
                _("The arguments of this approval are not the ones you saw; reload and decide again.")
            )
        if decision == REJECT:
            _settle(
                approval=approval, status=Approval.Status.REJECTED, now=now, user=user, channel=channel, reason=reason
            )
            _resume_if_settled(run)
            return approval
        edited = None
        if arguments is not None and not isinstance(arguments, dict):
            raise ApprovalInvalid(_("The arguments must be a JSON object."))
        if arguments is not None and arguments_hash(arguments) != approval.arguments_hash:
            spec = _tool_spec(run, approval.invocation.tool_name)
            errors = (
                validate_arguments(spec["parameters"], arguments)
                if spec
                else [str(_("The tool is no longer available."))]
            )
            if errors:
                raise ApprovalInvalid(
                    _("The edited arguments do not fit the tool: %(errors)s") % {"errors": " ".join(errors)}, errors
                )
            edited = arguments
        _settle(
            approval=approval,
            status=Approval.Status.APPROVED,
            now=now,
            user=user,
            channel=channel,
            reason=reason,
            arguments=edited,
            for_rest_of_run=for_rest_of_run,
        )
        if for_rest_of_run:
            _grant_rest_of_run(run=run, approval=approval, user=user, now=now)
        _resume_if_settled(run)
    return approval


def _grant_rest_of_run(*, run: Run, approval: Approval, user, now) -> None:
    """Later calls of the tool are approved as they come (tool_step reads the grant); the ones
    already waiting in this step are approved now, each bound to its own arguments."""
    tool_name = approval.invocation.tool_name
    ApprovalGrant.objects.get_or_create(
        run=run, tool_name=tool_name, defaults={"approval": approval, "granted_by": user}
    )
    others = (
        Approval.objects.select_for_update()
        .select_related("invocation")
        .filter(run=run, status=Approval.Status.PENDING, invocation__tool_name=tool_name)
        .order_by("pk")
    )
    for other in others:
        _settle(
            approval=other,
            status=Approval.Status.APPROVED,
            now=now,
            user=user,
            channel=Approval.Channel.RUN_GRANT,
            reason=f"approved for the rest of the run with approval #{approval.pk}",
        )


def approvals_expire(*, now=None) -> int:
    """Expire overdue pending approvals; each run then continues or ends as its tool's policy says."""
    now = now or timezone.now()
    due = list(
        Approval.objects.filter(status=Approval.Status.PENDING, expires_at__lte=now)
        .order_by("expires_at")
        .values_list("pk", flat=True)
    )
    expired = 0
    for approval_id in due:
        with transaction.atomic():
            run, approval = _lock(approval_id)
            if approval.status != Approval.Status.PENDING:
                continue
            waited = int((now - approval.created_at).total_seconds())
            _settle(
                approval=approval,
                status=Approval.Status.EXPIRED,
                now=now,
                channel=Approval.Channel.SYSTEM,
                reason=f"no decision within {waited} s",
            )
            expired += 1
            spec = _tool_spec(run, approval.invocation.tool_name) or {}
            # An unanswered hand-off always continues: the model answers the fallback.
            ends = spec.get("approval", {}).get("on_expiry") == ApprovalExpiry.END_RUN
            if ends and approval.kind != Approval.Kind.HANDOFF:
                run_finish(
                    run_id=run.pk,
                    status=RunStatus.EXPIRED,
                    stop_reason=StopReason.APPROVAL_EXPIRED,
                    final_message=agent_says(
                        snapshot_parse(run.agent_version.snapshot),
                        EXPIRED_RUN_MESSAGE,
                        tool=approval.invocation.tool_name,
                    ),
                )
            else:
                _resume_if_settled(run)
    if expired:
        log.info("expired %s approval(s)", expired)
    return expired


def approvals_escalate(*, now: datetime | None = None) -> int:
    """Escalate, once each, the pending approvals that waited past their agent's escalation time:
    an approval.escalated event (whose webhook deliveries are written with it, for the escalation
    channels) and, after commit, an email to the agent's escalation addresses."""
    now = now or timezone.now()
    due = []
    policies = Agent.objects.filter(approval_escalate_after_minutes__isnull=False).values_list(
        "pk", "approval_escalate_after_minutes"
    )
    for agent_id, minutes in policies:
        due += Approval.objects.filter(
            run__agent_id=agent_id,
            status=Approval.Status.PENDING,
            escalated_at__isnull=True,
            created_at__lte=now - timedelta(minutes=minutes),
        ).values_list("pk", "run_id")
    escalated = 0
    for approval_id, run_id in sorted(due):
        with transaction.atomic():
            # Run first, approval second, as every decision locks them; a row held elsewhere is
            # being decided or escalated right now, so it is skipped, not waited for.
            run = (
                Run.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("agent")
                .filter(pk=run_id)
                .first()
            )
            approval = (
                Approval.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("invocation")
                .filter(pk=approval_id, status=Approval.Status.PENDING, escalated_at__isnull=True)
                .first()
                if run is not None
                else None
            )
            if approval is None:
                continue
            Approval.objects.filter(pk=approval.pk).update(escalated_at=now)
            _escalation_event(run=run, approval=approval, now=now)
            escalated += 1
    if escalated:
        log.info("escalated %s approval(s)", escalated)
    return escalated


def _escalation_event(*, run: Run, approval: Approval, now: datetime) -> None:
    invocation = approval.invocation
    waited = int((now - approval.created_at).total_seconds() // 60)
    payload = events.approval_escalated(
        approval_id=approval.pk,
        tool_invocation_id=invocation.pk,
        tool_call_id=approval.tool_call_id,
        tool=invocation.tool_name,
        arguments=approval.arguments,
        arguments_hash=approval.arguments_hash,
        why=approval.request_reason,
        expires_at=approval.expires_at.isoformat() if approval.expires_at else None,
        waited_minutes=waited,
    )
    run_event_append(run_id=run.pk, type=EventType.APPROVAL_ESCALATED, payload=payload)
