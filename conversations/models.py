"""Conversations and the ledger: every run, model call, tool call, approval and event is a row."""

import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import ExpressionWrapper, F, Q
from django.utils.translation import gettext_lazy as _

from workspaces.defaults import InWorkspace
from workspaces.roles import Role, validate_scopes


class Conversation(models.Model):
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.PROTECT, related_name="conversations", verbose_name=_("agent")
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="conversations",
        verbose_name=_("owner"),
    )
    title = models.CharField(max_length=200, blank=True, verbose_name=_("title"))
    metadata = models.JSONField(default=dict, blank=True, verbose_name=_("metadata"))
    # Next Message.order; bumped under a row lock so concurrent writers never collide.
    message_count = models.PositiveIntegerField(default=0, verbose_name=_("message count"))
    # Context policy: earlier turns folded into a summary by a model call (purpose "summary"),
    # kept here so later steps send it instead of recomputing it; it covers every message up
    # to and including order `context_summary_through`.
    context_summary = models.TextField(blank=True, default="", verbose_name=_("context summary"))
    context_summary_through = models.PositiveIntegerField(default=0, verbose_name=_("context summary through"))
    context_summary_call = models.ForeignKey(
        "LLMCall",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("context summary call"),
    )
    # The released version this conversation runs (agents.releases): chosen at its first message
    # once its agent is published, kept while that version stays live, so a canary never
    # switches a conversation mid-way. Empty while the agent serves its draft.
    agent_version = models.ForeignKey(
        "agents.AgentVersion",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        verbose_name=_("agent version"),
    )
    # The application's own id for the person it serves (opaque to Agentry): limits, memory,
    # listing and forgetting are per end user. Empty: the API token's owner speaks for nobody else.
    end_user = models.CharField(max_length=200, blank=True, default="", verbose_name=_("end user"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["end_user", "agent", "-created_at"],
                name="conversation_end_user_idx",
                condition=~models.Q(end_user=""),
            )
        ]

    def __str__(self):
        return self.title or str(self.id)


class Message(models.Model):
    class Role(models.TextChoices):
        # Only a chat completion request stores one: the client's own system message opens its
        # conversation. An agent's system prompt is built per call and never stored.
        SYSTEM = "system", _("System")
        USER = "user", _("User")
        ASSISTANT = "assistant", _("Assistant")
        TOOL = "tool", _("Tool")

    # Not indexed on its own: message_order_unique (conversation, order) leads with it, and one
    # index fewer is one B-tree fewer to update for every message written.
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "conversation__agent__workspace"
    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.PROTECT,
        related_name="messages",
        verbose_name=_("conversation"),
        db_index=False,
    )
    run = models.ForeignKey(
        "Run", on_delete=models.PROTECT, null=True, blank=True, related_name="messages", verbose_name=_("run")
    )
    # The model call that produced an assistant message (its tool calls hang off it).
    llm_call = models.ForeignKey(
        "LLMCall", on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("LLM call")
    )
    order = models.PositiveIntegerField(verbose_name=_("order"))
    role = models.CharField(max_length=16, choices=Role.choices, verbose_name=_("role"))
    content = models.TextField(blank=True, default="", verbose_name=_("content"))
    tool_calls = models.JSONField(null=True, blank=True, verbose_name=_("tool calls"))
    tool_call_id = models.CharField(max_length=128, blank=True, default="", verbose_name=_("tool call id"))
    name = models.CharField(max_length=64, blank=True, default="", verbose_name=_("name"))
    # Provider reasoning that must travel with the message (Anthropic thinking blocks and
    # their signatures are required again when a tool-use turn continues).
    reasoning = models.JSONField(null=True, blank=True, verbose_name=_("reasoning"))
    # What models are shown instead of `content` when the agent's input guardrails changed it (the
    # redacted text, or the blocked placeholder); null: the content as it is. Set by the check of
    # the run that brings the message (engine.guardrails), so later steps and runs read it back
    # instead of scanning the message again.
    # null, not "": a message redacted to nothing is screened too.
    screened_content = models.TextField(null=True, blank=True, verbose_name=_("content as models see it"))  # noqa: DJ001
    # The attachments the message carries after its text, in order (attachments.parts); null for
    # a text-only message.
    parts = models.JSONField(null=True, blank=True, verbose_name=_("attachments"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        ordering = ["conversation", "order"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "order"], name="message_order_unique"),
        ]

    def __str__(self):
        return f"{self.role}#{self.order}"


class RunStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
    # Agents as tools: the run's step started runs of other agents and waits for their answers.
    AWAITING_CHILDREN = "awaiting_children", _("Awaiting delegated runs")
    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    EXPIRED = "expired", _("Expired")


TERMINAL_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.EXPIRED)


class StopReason(models.TextChoices):
    FINAL_ANSWER = "final_answer", _("Final answer")
    MAX_ITERATIONS = "max_iterations", _("Max iterations")
    TOOL_LOOP = "tool_loop", _("Tool loop")
    BUDGET = "budget", _("Budget")
    TIMEOUT = "timeout", _("Timeout")
    PROVIDER_ERROR = "provider_error", _("Provider error")
    EMPTY_ANSWER = "empty_answer", _("Empty answer")
    TRUNCATED = "truncated", _("Answer cut off")
    GUARDRAIL_BLOCKED = "guardrail_blocked", _("Guardrail blocked")
    # The answer never matched the agent's output schema, also after the repair turns.
    SCHEMA_INVALID = "schema_invalid", _("Answer not in the schema")
    CANCELLED = "cancelled", _("Cancelled")
    APPROVAL_EXPIRED = "approval_expired", _("Approval expired")
    WORKER_LOST = "worker_lost", _("Worker lost")
    INTERNAL_ERROR = "internal_error", _("Internal error")


class ForkChange(models.TextChoices):
    """What a fork of a run changes from its fork point on (engine.forks)."""

    NONE = "none", _("nothing (a replay)")
    VERSION = "version", _("another agent version")
    MODEL = "model", _("another model config")
    TOOL_RESULT = "tool_result", _("an edited tool result")
    USER_MESSAGE = "user_message", _("an edited user message")


class RunTrigger(models.TextChoices):
    """What started a run: the way in that created it (engine.admission's callers, forks,
    delegation)."""

    API = "api", _("REST API")
    OPENAI = "openai", _("OpenAI-compatible API (/v1)")
    WIDGET = "widget", _("chat widget")
    SCHEDULE = "schedule", _("schedule")
    HOOK = "hook", _("inbound hook")
    CONSOLE = "console", _("operator console")
    CLI = "cli", _("command line")
    FORK = "fork", _("fork")
    EVAL = "eval", _("evaluation or replay")
    DELEGATION = "delegation", _("delegation")
    # The prompt playground (console.playground): a sandboxed run, like a fork's, kept out of
    # production figures.
    PLAYGROUND = "playground", _("prompt playground")
    # Agents reached from elsewhere (issue: MCP, A2A, chat apps): an MCP client's tool call, an
    # A2A client's message, a chat app's message to the agent's bot.
    MCP = "mcp", _("MCP client")
    A2A = "a2a", _("A2A client")
    CHAT_APP = "chat_app", _("chat app")


class Run(models.Model):
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Indexed by run_conversation_idx (conversation, created_at), which leads with it.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.PROTECT, related_name="runs", verbose_name=_("conversation"), db_index=False
    )
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="runs", verbose_name=_("agent"))
    agent_version = models.ForeignKey(
        "agents.AgentVersion", on_delete=models.PROTECT, related_name="runs", verbose_name=_("agent version")
    )
    status = models.CharField(
        max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED, verbose_name=_("status")
    )
    stop_reason = models.CharField(
        max_length=20, choices=StopReason.choices, blank=True, default="", verbose_name=_("stop reason")
    )
    error = models.TextField(blank=True, default="", verbose_name=_("error"))
    cancel_requested = models.BooleanField(default=False, verbose_name=_("cancel requested"))
    iterations = models.PositiveIntegerField(default=0, verbose_name=_("iterations"))
    prompt_tokens = models.PositiveIntegerField(default=0, verbose_name=_("prompt tokens"))
    completion_tokens = models.PositiveIntegerField(default=0, verbose_name=_("completion tokens"))
    cached_tokens = models.PositiveIntegerField(default=0, verbose_name=_("cached tokens"))
    reasoning_tokens = models.PositiveIntegerField(default=0, verbose_name=_("reasoning tokens"))
    total_tokens = models.PositiveIntegerField(default=0, verbose_name=_("total tokens"))
    # Some of the totals are estimates: at least one call's server reported no usage.
    usage_estimated = models.BooleanField(default=False, verbose_name=_("usage estimated"))
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=0, verbose_name=_("cost"))
    # Lease: the worker holding the run renews it; a lapsed lease means the worker is gone.
    lease_owner = models.CharField(max_length=128, blank=True, default="", verbose_name=_("lease owner"))
    lease_expires_at = models.DateTimeField(null=True, blank=True, verbose_name=_("lease expires at"))
    claims = models.PositiveIntegerField(default=0, verbose_name=_("claims"))
    recoveries = models.PositiveIntegerField(default=0, verbose_name=_("recoveries"))
    # When the run was last handed to the queue; the sweeper hands it again if no worker took it.
    enqueued_at = models.DateTimeField(null=True, blank=True, verbose_name=_("enqueued at"))
    event_seq = models.PositiveIntegerField(default=0, verbose_name=_("event seq"))
    # Wall-clock deadline from the agent's run_timeout_seconds; enforced by the loop and the sweeper.
    deadline = models.DateTimeField(null=True, blank=True, verbose_name=_("deadline"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))
    # The run's trace context when tracing is on (engine.tracing): its trace, the id of its
    # invoke_agent span (emitted when the run ends) and the caller's span, in lowercase hex.
    trace_id = models.CharField(max_length=32, blank=True, default="", verbose_name=_("trace id"))
    trace_span_id = models.CharField(max_length=16, blank=True, default="", verbose_name=_("trace span id"))
    trace_parent_span_id = models.CharField(
        max_length=16, blank=True, default="", verbose_name=_("trace parent span id")
    )
    # Set only on a run an evaluation started (evals): {"results": {tool name: the result the
    # case gives}, "live_reads": whether read tools without a given result run for real}. Its
    # tool step never executes a write tool (engine.tool_step); null marks ordinary traffic.
    # A fork's run (engine.forks) is sandboxed the same way: {"recorded": the calls its source's
    # tree made, given back when the same call is made again, "results": what the operator gives
    # a write tool, "live_reads", "delegate": its delegate calls start sandboxed children,
    # "real_writes": "approval" lets a person allow a write for real, "model": the model config
    # it runs instead of its version's}. Evaluations' runs take "recorded" from replayed cases.
    sandbox = models.JSONField(null=True, blank=True, editable=False, verbose_name=_("sandbox"))
    # Forks (engine.forks): the run this one was forked from, the step it ran itself from (the
    # steps before were copied from the source's ledger), and what it changed: {"kind":
    # ForkChange, the change's own fields, "by"/"by_id": who forked it}.
    forked_from = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        db_index=False,
        editable=False,
        related_name="forks",
        verbose_name=_("forked from"),
    )
    fork_step = models.PositiveIntegerField(null=True, blank=True, editable=False, verbose_name=_("fork step"))
    fork_change = models.JSONField(null=True, blank=True, editable=False, verbose_name=_("fork change"))
    trigger = models.CharField(
        max_length=20, choices=RunTrigger.choices, default=RunTrigger.API, editable=False, verbose_name=_("trigger")
    )
    # Agents as tools (engine.delegation): the run and the tool call that started this run, how
    # many delegations deep it is, and what its delegated runs (their whole trees) used, added
    # as each of them ends so the run's budgets count the tree.
    # Indexed only where set (Meta.indexes): nearly every run has no parent, and each index entry
    # is paid by every run's insert.
    parent_run = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        db_index=False,
        related_name="children",
        verbose_name=_("parent run"),
    )
    parent_tool_invocation = models.ForeignKey(
        "ToolInvocation",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        db_index=False,
        related_name="child_runs",
        verbose_name=_("parent tool invocation"),
    )
    depth = models.PositiveSmallIntegerField(default=0, verbose_name=_("delegation depth"))
    children_tokens = models.PositiveBigIntegerField(default=0, verbose_name=_("delegated runs' tokens"))
    children_cost = models.DecimalField(
        max_digits=16, decimal_places=8, default=0, verbose_name=_("delegated runs' cost")
    )
    # What the API client attached to the run (conversations.run_labels checks them): short tags
    # and string-to-string metadata, shown with the run. Columns with a constant default cost
    # nothing on the runs that carry none (no rewrite when added, a few bytes a row); operators
    # find runs by them through RunLabel, written only when there are some.
    tags = models.JSONField(default=list, blank=True, editable=False, verbose_name=_("tags"))
    metadata = models.JSONField(default=dict, blank=True, editable=False, verbose_name=_("metadata"))
    # The routing decision (engine.routing), made once at the run's first model step and read
    # with the run by every later one: the rule that matched (or none) and what it saw. Null for
    # an agent without routing rules.
    routing = models.JSONField(null=True, blank=True, editable=False, verbose_name=_("routing"))
    # Answers in a schema (agents.output_schema): the schema this run's answer must match when
    # its request gave one (a /v1 response_format), over the version's; null: the version's.
    output_schema = models.JSONField(null=True, blank=True, editable=False, verbose_name=_("output schema"))
    # The final answer parsed as JSON, once it matched the schema; null without a schema. Beside
    # the answer's text, which the API calls the run's output.
    output_parsed = models.JSONField(null=True, blank=True, editable=False, verbose_name=_("parsed output"))

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        ordering = ["-created_at"]
        # Operators' actions on runs (monitoring pages and admin); seeing runs is view_run.
        permissions = [
            ("operate_run", _("Can cancel, requeue and retry runs")),
            # Export reads everything an auditor may see, in bulk: its own grant, beyond view_run.
            ("export_run", _("Can export runs with their audit rows")),
            # A fork runs the agent's model and (read) tools again, for whoever forks it.
            ("fork_run", _("Can fork runs and replay them against a version")),
        ]
        indexes = [
            # The sweeper scans for lapsed leases among running runs only (a few hundred rows per
            # worker). The lease's expiry is left out of the index on purpose: every step extends
            # it, and an UPDATE that changes no indexed column is a heap-only (HOT) update, which
            # writes no index entry at all; with it indexed, each step wrote one into every index.
            # The id is in it so that a step's fenced UPDATE (id = … AND status = 'running') finds
            # its one row whichever index the planner takes: statistics that say running runs are
            # rare (most runs have ended) made it take this one, and with (status) alone each
            # step's statement walked every running run's entry (measured: a quarter of the
            # database's CPU with 200 runs in flight).
            models.Index(fields=["status", "id"], name="run_status_idx"),
            models.Index(fields=["conversation", "created_at"], name="run_conversation_idx"),
            # The runs list (newest first, a page at a time by cursor) and exports by time window
            # read runs in creation order; retention takes an agent's oldest runs a batch at a
            # time. Without them each read sorted the whole ledger (issue 43: 4.3 s a page at 10
            # million model calls).
            models.Index(fields=["created_at"], name="run_created_idx"),
            models.Index(fields=["agent", "created_at"], name="run_agent_created_idx"),
            # The sweeper ends open runs past their deadline; closed runs stay out of the index.
            models.Index(
                fields=["deadline"],
                name="run_open_deadline_idx",
                condition=Q(
                    status__in=["queued", "running", "awaiting_approval", "awaiting_children"], deadline__isnull=False
                ),
            ),
            # The monitoring rollups read the runs that ended in the last hours.
            models.Index(fields=["finished_at"], name="run_finished_idx"),
            models.Index(fields=["parent_run"], condition=Q(parent_run__isnull=False), name="run_parent_idx"),
            models.Index(fields=["forked_from"], condition=Q(forked_from__isnull=False), name="run_forked_from_idx"),
            # The runs list filtered by what started them (?trigger=), newest first by cursor.
            models.Index(fields=["trigger", "created_at"], name="run_trigger_created_idx"),
            models.Index(
                fields=["parent_tool_invocation"],
                condition=Q(parent_tool_invocation__isnull=False),
                name="run_parent_tool_call_idx",
            ),
            # The runs list by duration (?duration_min / ?duration_max, finished_at - started_at):
            # without it a range few runs fall in read every run of the ledger (0.85 s at 10
            # million model calls; 36 ms with it, bench.scale_ledger). Ended runs only, one entry
            # each, written by the update that ends the run: that update changes the status and
            # finished_at, both indexed already, so it writes into every index anyway; started_at
            # is set by the update that starts the run, which changes the status too. No update
            # that was heap-only (HOT) stops being so.
            models.Index(
                ExpressionWrapper(F("finished_at") - F("started_at"), output_field=models.DurationField()),
                name="run_duration_idx",
                condition=Q(started_at__isnull=False, finished_at__isnull=False),
            ),
        ]

    def __str__(self):
        return _("run %(id)s (%(status)s)") % {"id": self.id, "status": self.get_status_display().lower()}

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def duration_ms(self) -> int | None:
        if self.started_at and self.finished_at:
            return int((self.finished_at - self.started_at).total_seconds() * 1000)
        return None


class RunLabel(models.Model):
    """One of a run's tags (key "") or metadata pairs, as a row the runs list filters by.

    A lookup table rather than a query into Run.tags / Run.metadata: JSON containment (`@>`)
    is PostgreSQL's only (SQLite has no JSON `contains` lookup), and a GIN index on the run
    table would be paid by every run's INSERT, labelled or not. Here a run without labels
    writes nothing, and a labelled one writes one row per label in the statement that inserts
    it (engine.admission), so the post still costs one round trip."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    # Indexed by run_label_run_idx, which leads with it (retention deletes a run's labels by run).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="labels", verbose_name=_("run"), db_index=False)
    key = models.CharField(max_length=64, blank=True, verbose_name=_("key"))
    value = models.CharField(max_length=512, verbose_name=_("value"))

    class Meta:
        verbose_name = _("run label")
        verbose_name_plural = _("run labels")
        indexes = [
            # ?tag= and ?meta=key:value: the runs carrying a label, found by the label.
            models.Index(fields=["key", "value", "run"], name="run_label_lookup_idx"),
            models.Index(fields=["run"], name="run_label_run_idx"),
        ]

    def __str__(self):
        return f"{self.key}:{self.value}" if self.key else self.value


class LLMCall(models.Model):
    """One attempt at one model call: written before the request, completed after."""

    class Status(models.TextChoices):
        STARTED = "started", _("Started")
        SUCCEEDED = "succeeded", _("Succeeded")
        FAILED = "failed", _("Failed")

    class Purpose(models.TextChoices):
        STEP = "step", _("Step")
        SUMMARY = "summary", _("Summary")
        EMBEDDING = "embedding", _("Embedding")
        # A guardrail's moderation check (engine.guardrails): iteration 0 judges the user's
        # message, iteration n the answer of step n.
        MODERATION = "moderation", _("Moderation")
        # An eval case's rubric judging the run's final answer (evals.judge), once, after the run ended.
        JUDGE = "judge", _("Judge")
        # Long-term memory: what a completed run's conversation tells about its end user
        # (engine.memory), iteration = the run's last step.
        MEMORY = "memory", _("Memory")
        # A part the agent's model does not take, turned into text before the step that sends it
        # (attachments.models.PartText): an audio clip transcribed, an image described.
        TRANSCRIPTION = "transcription", _("Transcription")
        DESCRIPTION = "description", _("Description")
        # An online evaluator's judge scoring a completed production run (evals.online), after
        # the run ended and out of its totals, like an eval case's judge.
        ONLINE_JUDGE = "online_judge", _("Online judge")
        # A routing rule's classifier call choosing the step's model (engine.routing), before the step.
        ROUTING = "routing", _("Routing")

    # Empty only for calls made outside a run: embeddings of documents being indexed (the
    # knowledge app links those to their base).
    # Indexed by llm_call_attempt_unique (run, purpose, iteration, attempt), which leads with it.
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    run = models.ForeignKey(
        Run,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="llm_calls",
        verbose_name=_("run"),
        db_index=False,
    )
    iteration = models.PositiveIntegerField(verbose_name=_("iteration"))
    attempt = models.PositiveSmallIntegerField(verbose_name=_("attempt"))
    purpose = models.CharField(max_length=16, choices=Purpose.choices, default=Purpose.STEP, verbose_name=_("purpose"))
    model_config = models.ForeignKey(
        "agents.ModelConfig", on_delete=models.PROTECT, related_name="+", verbose_name=_("model config")
    )
    provider = models.CharField(max_length=32, verbose_name=_("provider"))
    model_name = models.CharField(max_length=200, verbose_name=_("model name"))
    request = models.JSONField(verbose_name=_("request"))
    response = models.JSONField(null=True, blank=True, verbose_name=_("response"))
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STARTED, verbose_name=_("status"))
    http_status = models.PositiveSmallIntegerField(null=True, blank=True, verbose_name=_("HTTP status"))
    finish_reason = models.CharField(max_length=32, blank=True, default="", verbose_name=_("finish reason"))
    prompt_tokens = models.PositiveIntegerField(default=0, verbose_name=_("prompt tokens"))
    completion_tokens = models.PositiveIntegerField(default=0, verbose_name=_("completion tokens"))
    cached_tokens = models.PositiveIntegerField(default=0, verbose_name=_("cached tokens"))
    reasoning_tokens = models.PositiveIntegerField(default=0, verbose_name=_("reasoning tokens"))
    # Of the prompt tokens, those of images and of audio the call sent (attachments.parts), by
    # the provider's published rules where its server does not report them apart.
    image_tokens = models.PositiveIntegerField(default=0, verbose_name=_("image tokens"))
    audio_tokens = models.PositiveIntegerField(default=0, verbose_name=_("audio tokens"))
    # Of the prompt tokens, those the provider wrote to its prompt cache (Anthropic), priced apart.
    cache_write_tokens = models.PositiveIntegerField(default=0, verbose_name=_("cache write tokens"))
    total_tokens = models.PositiveIntegerField(default=0, verbose_name=_("total tokens"))
    usage_estimated = models.BooleanField(default=False, verbose_name=_("usage estimated"))
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=0, verbose_name=_("cost"))
    latency_ms = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("latency ms"))
    error = models.TextField(blank=True, default="", verbose_name=_("error"))
    # Why this model config was tried (engine.routing): the rule that matched and what it saw,
    # or null where the agent has no routing rules (its model, then its fallback).
    routing = models.JSONField(null=True, blank=True, verbose_name=_("routing"))
    # A fork's copy of its source's call (engine.forks): the answer as recorded, never sent
    # again; its usage and cost stay the source's (zero here, out of the fork's totals).
    copied = models.BooleanField(default=False, verbose_name=_("copied"))
    started_at = models.DateTimeField(auto_now_add=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    class Meta:
        verbose_name = _("LLM call")
        verbose_name_plural = _("LLM calls")
        ordering = ["run", "iteration", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["run", "purpose", "iteration", "attempt"], name="llm_call_attempt_unique"),
        ]
        indexes = [
            models.Index(fields=["started_at"], name="llm_call_started_idx"),
            # The sweeper's look for calls left started by a dead worker (engine.sweeper): the few
            # started rows, whatever the size of the ledger.
            models.Index(fields=["started_at"], condition=models.Q(status="started"), name="llm_call_open_idx"),
            # The dashboard's memory panel counts a day's extraction calls: without it, a day's
            # every call was read to find the few (121 ms at the scale benchmark's 10 million
            # calls). Only extraction calls get an entry, and neither column changes after the
            # insert, so ordinary calls pay nothing for it.
            models.Index(
                fields=["started_at"], condition=models.Q(purpose="memory"), name="llm_call_memory_started_idx"
            ),
        ]

    def __str__(self):
        return _("LLM call %(iteration)s.%(attempt)s (%(status)s)") % {
            "iteration": self.iteration,
            "attempt": self.attempt,
            "status": self.get_status_display().lower(),
        }


class ToolInvocation(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
        RUNNING = "running", _("Running")
        SUCCEEDED = "succeeded", _("Succeeded")
        ERROR = "error", _("Error")
        REJECTED = "rejected", _("Rejected")
        BLOCKED = "blocked", _("Blocked")
        CANCELLED = "cancelled", _("Cancelled")

    # Indexed by tool_invocation_call_unique (run, tool_call_id), which leads with it.
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    run = models.ForeignKey(
        Run, on_delete=models.PROTECT, related_name="tool_invocations", verbose_name=_("run"), db_index=False
    )
    llm_call = models.ForeignKey(
        LLMCall, on_delete=models.PROTECT, related_name="tool_invocations", verbose_name=_("LLM call")
    )
    tool = models.ForeignKey(
        "tools.ToolDefinition",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("tool"),
    )
    tool_name = models.CharField(max_length=200, verbose_name=_("tool name"))
    tool_call_id = models.CharField(max_length=128, verbose_name=_("tool call id"))
    position = models.PositiveSmallIntegerField(default=0, verbose_name=_("position"))
    raw_arguments = models.TextField(blank=True, default="", verbose_name=_("raw arguments"))
    arguments = models.JSONField(null=True, blank=True, verbose_name=_("arguments"))
    validation_errors = models.JSONField(default=list, blank=True, verbose_name=_("validation errors"))
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING, verbose_name=_("status"))
    result = models.TextField(blank=True, default="", verbose_name=_("result"))
    truncated = models.BooleanField(default=False, verbose_name=_("truncated"))
    error = models.TextField(blank=True, default="", verbose_name=_("error"))
    idempotency_key = models.CharField(max_length=200, verbose_name=_("idempotency key"))
    latency_ms = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("latency ms"))
    # What the tool reported while it ran, e.g. a remote agent's {"a2a": {"task_id", "context_id", "state"}}.
    details = models.JSONField(default=dict, blank=True, verbose_name=_("details"))
    # The result is the one an evaluation case gave; the tool itself was not called.
    # The result is not the tool's: an evaluation case gave it, or a fork was given it (its
    # source's recorded result for the same call, or the operator's); the tool was not called.
    simulated = models.BooleanField(default=False, verbose_name=_("simulated"))
    # A fork's copy of its source's call, before the fork point (engine.forks).
    copied = models.BooleanField(default=False, verbose_name=_("copied"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    class Meta:
        verbose_name = _("tool invocation")
        verbose_name_plural = _("tool invocations")
        ordering = ["run", "llm_call", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="tool_invocation_call_unique"),
        ]

    def __str__(self):
        return f"{self.tool_name} ({self.get_status_display().lower()})"


class Approval(models.Model):
    """A person's decision on one tool call, bound to its tool call id and the hash of the
    exact arguments approved. The call's original arguments stay on the ToolInvocation;
    `arguments` here are what was approved (edited or not)."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        APPROVED = "approved", _("Approved")
        REJECTED = "rejected", _("Rejected")
        EXPIRED = "expired", _("Expired")
        CANCELLED = "cancelled", _("Cancelled")

    class Channel(models.TextChoices):
        PAGE = "page", _("approval page")
        API = "api", _("API")
        ADMIN = "admin", _("admin")
        # An approval card's button in a chat app (chatbots), as the presser's mapped account.
        CHAT_APP = "chat_app", _("chat app")
        RUN_GRANT = "run_grant", _("approved earlier for the rest of the run")
        SYSTEM = "system", _("system (expiry, cancellation)")

    class Kind(models.TextChoices):
        # A person decides whether the call runs (and with which arguments).
        TOOL_CALL = "tool_call", _("tool call")
        # The call ran and found nothing (a knowledge base set to hand off): a person writes
        # its result; approving carries the answer in `reason`.
        HANDOFF = "handoff", _("needs a person's answer")

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    invocation = models.OneToOneField(
        ToolInvocation, on_delete=models.PROTECT, related_name="approval", verbose_name=_("invocation")
    )
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="approvals", verbose_name=_("run"))
    tool_call_id = models.CharField(max_length=128, blank=True, default="", verbose_name=_("tool call id"))
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, verbose_name=_("status"))
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TOOL_CALL, verbose_name=_("kind"))
    arguments = models.JSONField(verbose_name=_("arguments"))
    arguments_hash = models.CharField(max_length=64, verbose_name=_("arguments hash"))
    # Why the policy asked (e.g. "rule `amount > 1000` matched"), shown to the approver.
    request_reason = models.CharField(max_length=500, blank=True, default="", verbose_name=_("request reason"))
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("decided by"),
    )
    decided_at = models.DateTimeField(null=True, blank=True, verbose_name=_("decided at"))
    channel = models.CharField(
        max_length=16, choices=Channel.choices, blank=True, default="", verbose_name=_("channel")
    )
    reason = models.TextField(blank=True, default="", verbose_name=_("reason"))
    expires_at = models.DateTimeField(null=True, blank=True, verbose_name=_("expires at"))
    # Set once by the escalation pass (engine.approvals.approvals_escalate): its guard against
    # telling the escalation channels twice.
    escalated_at = models.DateTimeField(null=True, blank=True, verbose_name=_("escalated at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("approval")
        verbose_name_plural = _("approvals")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="approval_status_idx"),
            # The expiry task looks only at pending approvals with a deadline.
            models.Index(fields=["expires_at"], name="approval_pending_expiry_idx", condition=Q(status="pending")),
        ]
        permissions = [("decide_approval", _("Can approve or reject tool calls"))]

    def __str__(self):
        return _("approval %(id)s (%(status)s)") % {"id": self.pk, "status": self.get_status_display().lower()}


class ApprovalGrant(models.Model):
    """ "Approve every call of this tool for the rest of this run", given with one decision.
    Later calls still get their own Approval row, approved through this grant."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="approval_grants", verbose_name=_("run"))
    tool_name = models.CharField(max_length=200, verbose_name=_("tool name"))
    approval = models.OneToOneField(
        Approval, on_delete=models.PROTECT, related_name="grant", verbose_name=_("approval")
    )
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", verbose_name=_("granted by")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("approval grant")
        verbose_name_plural = _("approval grants")
        constraints = [models.UniqueConstraint(fields=["run", "tool_name"], name="approval_grant_unique")]

    def __str__(self):
        return f"{self.tool_name} approved for run {self.run_id}"


class GuardrailTrigger(models.Model):
    """What one of the agent's guardrail rules found on a run's input or output (agents.guardrails):
    one row per rule and check, however many matches (`count`).

    `matched` is what an auditor may read of the first match: a term or a pattern's match
    (clipped), and for personal data only a mask (the last four digits, an email's domain), never
    the value; `samples`, the first few matches alike. Rows written before matches were counted
    are one per match: count 1, no samples."""

    class Side(models.TextChoices):
        INPUT = "input", _("Input")
        OUTPUT = "output", _("Output")

    class Action(models.TextChoices):
        BLOCK = "block", _("Block")
        REDACT = "redact", _("Redact")
        FLAG = "flag", _("Flag")

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="guardrail_triggers", verbose_name=_("run"))
    side = models.CharField(max_length=8, choices=Side.choices, verbose_name=_("side"))
    # The rule's id in the agent version's snapshot; the rule itself may have been edited or deleted since.
    rule_id = models.PositiveIntegerField(verbose_name=_("rule id"))
    kind = models.CharField(max_length=20, verbose_name=_("kind"))
    action = models.CharField(max_length=8, choices=Action.choices, verbose_name=_("action"))
    matched = models.CharField(max_length=250, blank=True, default="", verbose_name=_("matched"))
    count = models.PositiveIntegerField(default=1, verbose_name=_("matches"))
    samples = models.JSONField(default=list, blank=True, verbose_name=_("first matches"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("guardrail trigger")
        verbose_name_plural = _("guardrail triggers")
        ordering = ["run", "id"]
        # The review list reads the flagged runs, newest first.
        indexes = [models.Index(fields=["action", "created_at"], name="guardrail_trigger_action_idx")]

    def __str__(self):
        return f"{self.side} {self.kind} {self.action}"


class RunEvent(models.Model):
    # Indexed by run_event_seq_unique (run, seq), which leads with it.
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events", verbose_name=_("run"), db_index=False)
    seq = models.PositiveIntegerField(verbose_name=_("seq"))
    type = models.CharField(max_length=40, verbose_name=_("type"))
    payload = models.JSONField(default=dict, blank=True, verbose_name=_("payload"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("run event")
        verbose_name_plural = _("run events")
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq_unique"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="run_event_seq_positive"),
        ]

    def __str__(self):
        return f"{self.seq} {self.type}"


class ApiToken(InWorkspace):
    """A per-user API credential. Only a hash is stored; the token is shown once, at creation."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens", verbose_name=_("user")
    )
    name = models.CharField(
        max_length=100, help_text=_("What this token is for, e.g. 'billing backend'."), verbose_name=_("name")
    )
    # A token acts in its workspace with its owner's role there, or less: a narrower role, or a
    # list of scopes (workspaces.roles.Scope). It can never do more than its owner may.
    role = models.CharField(
        max_length=16,
        blank=True,
        default="",
        choices=[(role, label) for role, label in Role.choices if role != Role.CUSTOM],
        help_text=_("Empty: the owner's own role in the workspace."),
        verbose_name=_("role"),
    )
    scopes = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_scopes],
        help_text=_("Empty: everything the role allows. Else a list of: runs, approvals, memories, admin-read."),
        verbose_name=_("scopes"),
    )
    prefix = models.CharField(max_length=12, editable=False, verbose_name=_("prefix"))
    key_hash = models.CharField(max_length=64, unique=True, editable=False, verbose_name=_("key hash"))
    is_active = models.BooleanField(default=True, verbose_name=_("is active"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False, verbose_name=_("last used at"))

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

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    run = models.OneToOneField(Run, on_delete=models.PROTECT, related_name="request", verbose_name=_("run"))
    conversation = models.ForeignKey(
        Conversation, on_delete=models.PROTECT, related_name="run_requests", verbose_name=_("conversation")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("user"),
    )
    content = models.TextField(verbose_name=_("content"))
    # The attachments posted with it (attachments.parts), given to its user message on admission.
    parts = models.JSONField(null=True, blank=True, verbose_name=_("attachments"))
    idempotency_key = models.CharField(max_length=200, blank=True, default="", verbose_name=_("idempotency key"))
    content_hash = models.CharField(max_length=64, verbose_name=_("content hash"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("run request")
        verbose_name_plural = _("run requests")
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


class RunPurge(models.Model):
    """A tombstone: what one retention sweep removed for one agent, and whose policy it applied.

    Written in the same transactions as the deletions it counts, so its counts never claim more
    or less than was removed. Kept as text too (agent slug, user name) so it outlives both."""

    # Its workspace is its agent's (workspaces.access.in_workspace): once the agent is deleted,
    # only a superuser acting installation-wide reads it.
    workspace_path = "agent__workspace"
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.SET_NULL, null=True, related_name="+", verbose_name=_("agent")
    )
    agent_slug = models.CharField(max_length=100, verbose_name=_("agent slug"))
    retention_days = models.PositiveIntegerField(verbose_name=_("retention days"))
    # Runs created before this instant were eligible.
    cutoff = models.DateTimeField(verbose_name=_("cutoff"))
    # Rows removed, by kind: {"runs": 3, "llm_calls": 9, "tool_invocations": 4, ...}.
    counts = models.JSONField(default=dict, verbose_name=_("counts"))
    policy_set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("policy set by"),
    )
    policy_set_by_username = models.CharField(
        max_length=150, blank=True, default="", verbose_name=_("policy set by username")
    )
    policy_set_at = models.DateTimeField(null=True, blank=True, verbose_name=_("policy set at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    class Meta:
        verbose_name = _("run purge")
        verbose_name_plural = _("run purges")
        ordering = ["-created_at"]

    def __str__(self):
        return _("purge of %(agent)s before %(cutoff)s") % {
            "agent": self.agent_slug,
            "cutoff": f"{self.cutoff:%Y-%m-%d}",
        }


class RunFeedback(models.Model):
    """An end user's rating of a run's answer, posted by the application that serves them (the
    conversation's owner): one per run, a later post replaces it."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="feedback", verbose_name=_("run"))
    rating = models.SmallIntegerField(
        choices=[(1, _("Helpful")), (-1, _("Not helpful"))],
        validators=[MinValueValidator(-1), MaxValueValidator(1)],
        verbose_name=_("rating"),
    )
    comment = models.TextField(blank=True, default="", max_length=2000, verbose_name=_("comment"))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("posted by"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("feedback")
        verbose_name_plural = _("feedback")
        ordering = ["-created_at"]
        constraints = [models.CheckConstraint(condition=models.Q(rating__in=[1, -1]), name="run_feedback_rating")]
        indexes = [models.Index(fields=["rating", "-created_at"], name="run_feedback_rating_idx")]

    def __str__(self):
        return f"{self.get_rating_display()} #{self.run_id}"


class EndUserErasure(models.Model):
    """The audit row of forgetting an end user: who asked, through what, and how many rows of
    each kind were removed or anonymised. It keeps a keyed hash of the id, never the id itself,
    so the row proves the erasure without holding what was erased."""

    class Channel(models.TextChoices):
        API = "api", _("API")
        ADMIN = "admin", _("Admin")

    # The workspace whose end user was forgotten (an application's token, a member in the admin
    # act in one); empty: a superuser acting installation-wide forgot them in every workspace
    # (not an InWorkspace: never filled with the first workspace).
    workspace = models.ForeignKey(
        "workspaces.Workspace",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("workspace"),
    )
    end_user_digest = models.CharField(max_length=64, db_index=True, verbose_name=_("end user digest"))
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("requested by"),
    )
    requested_by_username = models.CharField(
        max_length=150, blank=True, default="", verbose_name=_("requested by username")
    )
    channel = models.CharField(max_length=8, choices=Channel.choices, verbose_name=_("channel"))
    # {"conversations": 2, "messages": 14, "memories": 3, "feedback": 1, "llm_calls_anonymised": 9, ...}
    counts = models.JSONField(default=dict, verbose_name=_("counts"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("end user erasure")
        verbose_name_plural = _("end user erasures")
        ordering = ["-created_at"]
        permissions = [("forget_end_user", _("Can forget an end user (delete their conversations and memories)"))]

    def __str__(self):
        return _("erasure %(digest)s") % {"digest": self.end_user_digest[:12]}


# Hourly rollups for the monitoring dashboard (derived from the ledger above).
from conversations.monitoring.models import ErrorHourly, LLMCallHourly, RollupState, RunHourly  # noqa: E402,F401
