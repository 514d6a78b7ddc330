"""Conversations and the ledger: every run, model call, tool call, approval and event is a row."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from platform_site.crypto import EncryptedTextField


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="conversations")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # Next Message.order; bumped under a row lock so concurrent writers never collide.
    message_count = models.PositiveIntegerField(default=0)
    # Context policy: earlier turns folded into a summary by a model call (purpose "summary"),
    # kept here so later steps send it instead of recomputing it; it covers every message up
    # to and including order `context_summary_through`.
    context_summary = models.TextField(blank=True, default="")
    context_summary_through = models.PositiveIntegerField(default=0)
    context_summary_call = models.ForeignKey(
        "LLMCall", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return self.title or str(self.id)


class Message(models.Model):
    class Role(models.TextChoices):
        # Only a chat completion request stores one: the client's own system message opens its
        # conversation. An agent's system prompt is built per call and never stored.
        SYSTEM = "system"
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    conversation = models.ForeignKey(Conversation, on_delete=models.PROTECT, related_name="messages")
    run = models.ForeignKey("Run", on_delete=models.PROTECT, null=True, blank=True, related_name="messages")
    # The model call that produced an assistant message (its tool calls hang off it).
    llm_call = models.ForeignKey("LLMCall", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    order = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True, default="")
    tool_calls = models.JSONField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=128, blank=True, default="")
    name = models.CharField(max_length=64, blank=True, default="")
    # Provider reasoning that must travel with the message (Anthropic thinking blocks and
    # their signatures are required again when a tool-use turn continues).
    reasoning = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "order"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "order"], name="message_order_unique"),
        ]

    def __str__(self):
        return f"{self.role}#{self.order}"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


TERMINAL_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.EXPIRED)


class StopReason(models.TextChoices):
    FINAL_ANSWER = "final_answer"
    MAX_ITERATIONS = "max_iterations"
    TOOL_LOOP = "tool_loop"
    BUDGET = "budget"
    TIMEOUT = "timeout"
    PROVIDER_ERROR = "provider_error"
    EMPTY_ANSWER = "empty_answer"
    CANCELLED = "cancelled"
    APPROVAL_EXPIRED = "approval_expired"
    WORKER_LOST = "worker_lost"
    INTERNAL_ERROR = "internal_error"


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.PROTECT, related_name="runs")
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="runs")
    agent_version = models.ForeignKey("agents.AgentVersion", on_delete=models.PROTECT, related_name="runs")
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    stop_reason = models.CharField(max_length=20, choices=StopReason.choices, blank=True, default="")
    error = models.TextField(blank=True, default="")
    cancel_requested = models.BooleanField(default=False)
    iterations = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    # Some of the totals are estimates: at least one call's server reported no usage.
    usage_estimated = models.BooleanField(default=False)
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    # Lease: the worker holding the run renews it; a lapsed lease means the worker is gone.
    lease_owner = models.CharField(max_length=128, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    claims = models.PositiveIntegerField(default=0)
    recoveries = models.PositiveIntegerField(default=0)
    # When the run was last handed to the queue; the sweeper hands it again if no worker took it.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    event_seq = models.PositiveIntegerField(default=0)
    # Wall-clock deadline from the agent's run_timeout_seconds; enforced by the loop and the sweeper.
    deadline = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The run's trace context when tracing is on (engine.tracing): its trace, the id of its
    # invoke_agent span (emitted when the run ends) and the caller's span, in lowercase hex.
    trace_id = models.CharField(max_length=32, blank=True, default="")
    trace_span_id = models.CharField(max_length=16, blank=True, default="")
    trace_parent_span_id = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        # Operators' actions on runs (monitoring pages and admin); seeing runs is view_run.
        permissions = [
            ("operate_run", "Can cancel, requeue and retry runs"),
            # Export reads everything an auditor may see, in bulk: its own grant, beyond view_run.
            ("export_run", "Can export runs with their audit rows"),
        ]
        indexes = [
            # The sweeper scans for lapsed leases among running runs only (a few hundred rows per
            # worker). The lease's expiry is left out of the index on purpose: every step extends
            # it, and an UPDATE that changes no indexed column is a heap-only (HOT) update, which
            # writes no index entry at all; with it indexed, each step wrote one into every index.
            models.Index(fields=["status"], name="run_status_idx"),
            models.Index(fields=["conversation", "created_at"], name="run_conversation_idx"),
            # The sweeper ends open runs past their deadline; closed runs stay out of the index.
            models.Index(
                fields=["deadline"],
                name="run_open_deadline_idx",
                condition=Q(status__in=["queued", "running", "awaiting_approval"], deadline__isnull=False),
            ),
            # The monitoring rollups read the runs that ended in the last hours.
            models.Index(fields=["finished_at"], name="run_finished_idx"),
        ]

    def __str__(self):
        return f"run {self.id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def duration_ms(self) -> int | None:
        if self.started_at and self.finished_at:
            return int((self.finished_at - self.started_at).total_seconds() * 1000)
        return None


class LLMCall(models.Model):
    """One attempt at one model call: written before the request, completed after."""

    class Status(models.TextChoices):
        STARTED = "started"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    class Purpose(models.TextChoices):
        STEP = "step"
        SUMMARY = "summary"

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="llm_calls")
    iteration = models.PositiveIntegerField()
    attempt = models.PositiveSmallIntegerField()
    purpose = models.CharField(max_length=16, choices=Purpose.choices, default=Purpose.STEP)
    model_config = models.ForeignKey("agents.ModelConfig", on_delete=models.PROTECT, related_name="+")
    provider = models.CharField(max_length=32)
    model_name = models.CharField(max_length=200)
    request = models.JSONField()
    response = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STARTED)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    finish_reason = models.CharField(max_length=32, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    usage_estimated = models.BooleanField(default=False)
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("LLM call")
        verbose_name_plural = _("LLM calls")
        ordering = ["run", "iteration", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["run", "purpose", "iteration", "attempt"], name="llm_call_attempt_unique"),
        ]
        indexes = [models.Index(fields=["started_at"], name="llm_call_started_idx")]

    def __str__(self):
        return f"LLM call {self.iteration}.{self.attempt} ({self.status})"


class ToolInvocation(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        AWAITING_APPROVAL = "awaiting_approval"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        ERROR = "error"
        REJECTED = "rejected"
        BLOCKED = "blocked"
        CANCELLED = "cancelled"

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="tool_invocations")
    llm_call = models.ForeignKey(LLMCall, on_delete=models.PROTECT, related_name="tool_invocations")
    tool = models.ForeignKey("tools.ToolDefinition", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    tool_name = models.CharField(max_length=200)
    tool_call_id = models.CharField(max_length=128)
    position = models.PositiveSmallIntegerField(default=0)
    raw_arguments = models.TextField(blank=True, default="")
    arguments = models.JSONField(null=True, blank=True)
    validation_errors = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    result = models.TextField(blank=True, default="")
    truncated = models.BooleanField(default=False)
    error = models.TextField(blank=True, default="")
    idempotency_key = models.CharField(max_length=200)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "llm_call", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="tool_invocation_call_unique"),
        ]

    def __str__(self):
        return f"{self.tool_name} ({self.status})"


class Approval(models.Model):
    """A person's decision on one tool call, bound to its tool call id and the hash of the
    exact arguments approved. The call's original arguments stay on the ToolInvocation;
    `arguments` here are what was approved (edited or not)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"
        CANCELLED = "cancelled"

    class Channel(models.TextChoices):
        PAGE = "page", "approval page"
        API = "api", "API"
        ADMIN = "admin", "admin"
        RUN_GRANT = "run_grant", "approved earlier for the rest of the run"
        SYSTEM = "system", "system (expiry, cancellation)"

    invocation = models.OneToOneField(ToolInvocation, on_delete=models.PROTECT, related_name="approval")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="approvals")
    tool_call_id = models.CharField(max_length=128, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    arguments = models.JSONField()
    arguments_hash = models.CharField(max_length=64)
    # Why the policy asked (e.g. "rule `amount > 1000` matched"), shown to the approver.
    request_reason = models.CharField(max_length=500, blank=True, default="")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    channel = models.CharField(max_length=16, choices=Channel.choices, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="approval_status_idx"),
            # The expiry task looks only at pending approvals with a deadline.
            models.Index(fields=["expires_at"], name="approval_pending_expiry_idx", condition=Q(status="pending")),
        ]
        permissions = [("decide_approval", "Can approve or reject tool calls")]

    def __str__(self):
        return f"approval {self.pk} ({self.status})"


class ApprovalGrant(models.Model):
    """ "Approve every call of this tool for the rest of this run", given with one decision.
    Later calls still get their own Approval row, approved through this grant."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="approval_grants")
    tool_name = models.CharField(max_length=200)
    approval = models.OneToOneField(Approval, on_delete=models.PROTECT, related_name="grant")
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "tool_name"], name="approval_grant_unique")]

    def __str__(self):
        return f"{self.tool_name} approved for run {self.run_id}"


class RunEvent(models.Model):
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq_unique"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="run_event_seq_positive"),
        ]

    def __str__(self):
        return f"{self.seq} {self.type}"


class ApiToken(models.Model):
    """A per-user API credential. Only a hash is stored; the token is shown once, at creation."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What this token is for, e.g. 'billing backend'.")
    prefix = models.CharField(max_length=12, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"


class RunRequest(models.Model):
    """What was posted to start a run: by whom, what, and under which idempotency key.

    A run that waits its turn (the agent enqueues concurrent messages) gets its user message
    only when it is admitted, so the conversation reads in the order the turns were taken;
    until then its content lives here.
    """

    run = models.OneToOneField(Run, on_delete=models.PROTECT, related_name="request")
    conversation = models.ForeignKey(Conversation, on_delete=models.PROTECT, related_name="run_requests")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    content = models.TextField()
    idempotency_key = models.CharField(max_length=200, blank=True, default="")
    content_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "user", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="run_request_idempotency_unique",
            ),
        ]
        indexes = [
            # The expiry sweep clears keys older than AGENTRY_IDEMPOTENCY_KEY_HOURS; only keyed
            # requests are indexed, and a cleared key leaves the index.
            models.Index(fields=["created_at"], name="run_request_keyed_idx", condition=~Q(idempotency_key="")),
        ]

    def __str__(self):
        return f"request for {self.run_id}"


class Webhook(models.Model):
    """Where an agent's run outcomes and approval requests are POSTed, signed with the secret."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="webhooks")
    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="webhooks",
        help_text="Only this conversation's runs. Empty: every run of the agent.",
    )
    url = models.URLField(max_length=500)
    secret = EncryptedTextField()
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.agent} → {self.url}"


class WebhookDelivery(models.Model):
    """One event for one webhook; written with the event, so no commit loses a delivery."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    run_event = models.ForeignKey(RunEvent, on_delete=models.PROTECT, related_name="+")
    event_type = models.CharField(max_length=40)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["webhook", "run_event"], name="webhook_delivery_event_unique"),
        ]

    def __str__(self):
        return f"{self.event_type} → {self.webhook.url} ({self.status})"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveSmallIntegerField()
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)
    will_retry = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhook_attempt_number_unique"),
        ]

    def __str__(self):
        return f"attempt {self.number} ({self.http_status or self.error})"


class RunPurge(models.Model):
    """A tombstone: what one retention sweep removed for one agent, and whose policy it applied.

    Written in the same transactions as the deletions it counts, so its counts never claim more
    or less than was removed. Kept as text too (agent slug, user name) so it outlives both."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.SET_NULL, null=True, related_name="+")
    agent_slug = models.CharField(max_length=100)
    retention_days = models.PositiveIntegerField()
    # Runs created before this instant were eligible.
    cutoff = models.DateTimeField()
    # Rows removed, by kind: {"runs": 3, "llm_calls": 9, "tool_invocations": 4, ...}.
    counts = models.JSONField(default=dict)
    policy_set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    policy_set_by_username = models.CharField(max_length=150, blank=True, default="")
    policy_set_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("run purge")
        verbose_name_plural = _("run purges")
        ordering = ["-created_at"]

    def __str__(self):
        return f"purge of {self.agent_slug} before {self.cutoff:%Y-%m-%d}"


# Hourly rollups for the monitoring dashboard (derived from the ledger above).
from conversations.monitoring.models import ErrorHourly, LLMCallHourly, RollupState, RunHourly  # noqa: E402,F401
