"""Evaluation suites: cases with their expectations, and eval runs that play every case through
the engine and keep, per case and repetition, what was checked and the run that is the evidence."""

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from agents.models import AgentVersion
from evals.compare import DEFAULT_MAX_COST_INCREASE, DEFAULT_MAX_LATENCY_INCREASE, DEFAULT_MAX_RATE_DROP
from evals.matching import ExpectationInvalid, expected_calls_check, pattern_check, schema_check
from tools.arguments import contains_nul
from workspaces.defaults import InWorkspace
from workspaces.names import name_unique_in_workspace
from workspaces.references import references_check


class EvalSuite(InWorkspace):
    name = models.CharField(max_length=100, verbose_name=_("name"))
    description = models.TextField(blank=True, default="", verbose_name=_("description"))
    judge_model_config = models.ForeignKey(
        "agents.ModelConfig",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("judge model"),
        help_text=_("The model that judges the answers of the cases with a rubric."),
    )
    # A replay suite's (evals.replays): the agent and the filter its cases were picked with, and
    # the runs they replay; None for a suite written by hand. The release gate finds its replays by it.
    replay = models.JSONField(null=True, blank=True, editable=False, verbose_name=_("replay"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("eval suite")
        verbose_name_plural = _("eval suites")
        ordering = ["name"]
        constraints = [name_unique_in_workspace("eval_suite_name_per_workspace")]

    def __str__(self):
        return self.name

    def clean(self):
        references_check(self)


def _turns_check(turns) -> None:
    if not isinstance(turns, list) or not turns:
        raise ExpectationInvalid("turns must be a non-empty list")
    for turn in turns:
        if (
            not isinstance(turn, dict)
            or turn.get("role") not in ("user", "assistant")
            or not isinstance(turn.get("content"), str)
            or set(turn) - {"role", "content"}
        ):
            raise ExpectationInvalid('each turn is {"role": "user" or "assistant", "content": text}')
    if turns[-1]["role"] != "user":
        raise ExpectationInvalid("the last turn must be the user's")


MAX_PRIOR_CONVERSATIONS = 5


def _prior_conversations_check(conversations) -> None:
    if not isinstance(conversations, list) or len(conversations) > MAX_PRIOR_CONVERSATIONS:
        raise ExpectationInvalid(f"earlier conversations are a list of at most {MAX_PRIOR_CONVERSATIONS}")
    for number, turns in enumerate(conversations, start=1):
        try:
            _turns_check(turns)
        except ExpectationInvalid as exc:
            raise ExpectationInvalid(f"conversation {number}: {exc}") from None


def _texts_check(texts) -> None:
    if not isinstance(texts, list) or not all(isinstance(text, str) and text.strip() for text in texts):
        raise ExpectationInvalid("a list of texts, none empty")


def _names_check(names, what: str) -> None:
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ExpectationInvalid(f"{what} must be a list of tool names")


MAX_RECORDED_CALLS = 500


def recorded_calls_check(calls) -> None:
    """[{"name": text, "arguments": object, "result": text, "error": bool (optional)}, …]."""
    if not isinstance(calls, list) or len(calls) > MAX_RECORDED_CALLS:
        raise ExpectationInvalid(f"recorded calls are a list of at most {MAX_RECORDED_CALLS}")
    for number, call in enumerate(calls, start=1):
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("name"), str)
            or not call["name"]
            or not isinstance(call.get("arguments"), dict)
            or not isinstance(call.get("result"), str)
            or not isinstance(call.get("error", False), bool)
            or set(call) - {"name", "arguments", "result", "error"}
        ):
            raise ExpectationInvalid(
                f'recorded call {number}: {{"name": text, "arguments": object, "result": text, "error": true|false}}'
            )


def _tool_results_check(results) -> None:
    if not isinstance(results, dict) or not all(isinstance(v, str) for v in results.values()):
        raise ExpectationInvalid("tool results map a tool name to the text it returns")


TEXT_AND_JSON_FIELDS = (
    "name",
    "turns",
    "expected_tool_calls",
    "forbidden_tools",
    "answer_contains",
    "answer_pattern",
    "answer_schema",
    "answer_rubric",
    "answer_equals",
    "tool_results",
    "recorded_calls",
    "prior_conversations",
    "remembered",
    "forgotten",
)


class EvalCase(models.Model):
    """One task: the conversation so far (prior turns, then the user's last message) and what a
    good run of it does. Every expectation left empty is not checked."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "suite__workspace"
    suite = models.ForeignKey(EvalSuite, on_delete=models.CASCADE, related_name="cases", verbose_name=_("suite"))
    name = models.CharField(max_length=100, verbose_name=_("name"))
    position = models.PositiveIntegerField(default=0, verbose_name=_("position"))
    turns = models.JSONField(
        help_text=_('[{"role": "user"|"assistant", "content": "…"}, …]; the last is the user message the run answers.'),
        verbose_name=_("turns"),
    )
    expected_tool_calls = models.JSONField(
        default=list,
        blank=True,
        help_text=_(
            '[{"name": "…", "arguments": {subset}, "arguments_schema": {JSON Schema}, "arguments_pattern": "regex"}]; '
            "the argument matchers are optional."
        ),
        verbose_name=_("expected tool calls"),
    )
    forbidden_tools = models.JSONField(
        default=list, blank=True, help_text=_("Tool names that must not be called."), verbose_name=_("forbidden tools")
    )
    expect_no_tool = models.BooleanField(default=False, verbose_name=_("expect no tool call"))
    answer_contains = models.CharField(max_length=500, blank=True, default="", verbose_name=_("answer contains"))
    answer_pattern = models.CharField(max_length=500, blank=True, default="", verbose_name=_("answer pattern"))
    answer_schema = models.JSONField(
        null=True,
        blank=True,
        help_text=_("The answer, parsed as JSON, must match it."),
        verbose_name=_("answer schema"),
    )
    answer_rubric = models.TextField(
        blank=True,
        default="",
        help_text=_("What a good answer does, judged by the suite's judge model (pass or fail)."),
        verbose_name=_("answer rubric"),
    )
    # A replayed run's answer (evals.replays): the answer must be this text, whitespace at the ends aside.
    answer_equals = models.TextField(
        blank=True,
        default="",
        help_text=_("The answer must be exactly this text (leading and trailing whitespace aside)."),
        verbose_name=_("answer equals"),
    )
    max_model_turns = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("max model turns"))
    max_tokens = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("max tokens"))
    tool_results = models.JSONField(
        default=dict,
        blank=True,
        help_text=_(
            '{"tool name": "result text"}: what those tools return in this case; they are not called. '
            "A write tool without a given result fails its call."
        ),
        verbose_name=_("tool results"),
    )
    # The run a case was made from (a replay's, or one added from feedback): its turns, calls and
    # answer are that run's end user's words, so forgetting the end user reaches the case
    # (evals.erasure). Unlinked, not deleted, when retention purges the run.
    source_run = models.ForeignKey(
        "conversations.Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        verbose_name=_("made from run"),
    )
    # A case replayed from a production run (evals.replays): the calls that run made, each given
    # back when the candidate makes the same call (same tool, same arguments), before tool_results.
    recorded_calls = models.JSONField(
        default=list,
        blank=True,
        help_text=_(
            '[{"name": "tool name", "arguments": {…}, "result": "text"}, …]: what the replayed run\'s calls '
            "returned; the same call (same tool, same arguments) gets the same result, without being called."
        ),
        verbose_name=_("recorded calls"),
    )
    live_reads = models.BooleanField(
        default=True,
        help_text=_("Read tools without a given result run for real (otherwise their calls fail)."),
        verbose_name=_("live reads"),
    )
    # Long-term memory (engine.memory): the same end user's earlier conversations, each run and its
    # memories extracted before the next, within the eval run's own memory scope.
    prior_conversations = models.JSONField(
        default=list,
        blank=True,
        help_text=_(
            "[[turns], …]: conversations the same end user had before this one, each in the form of the turns "
            "above. Each is run in turn and its memories extracted before the next; then the case's own "
            "conversation is run and scored."
        ),
        verbose_name=_("earlier conversations"),
    )
    remembered = models.JSONField(
        default=list,
        blank=True,
        help_text=_('["…", …]: texts that must be in a memory the run is shown (what it should recall).'),
        verbose_name=_("remembered"),
    )
    forgotten = models.JSONField(
        default=list,
        blank=True,
        help_text=_(
            '["…", …]: texts that must be in no memory the run is shown, nor in its answer (a fact corrected '
            "or forgotten in an earlier conversation)."
        ),
        verbose_name=_("forgotten"),
    )

    class Meta:
        verbose_name = _("eval case")
        verbose_name_plural = _("eval cases")
        ordering = ["suite", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["suite", "name"], name="eval_case_name_unique")]

    def __str__(self):
        return self.name

    @property
    def uses_memory(self) -> bool:
        """Whether the case plays an end user with long-term memory (evals.services)."""
        return bool(self.prior_conversations or self.remembered or self.forgotten)

    def _suite(self) -> EvalSuite | None:
        # A new suite's inline cases hold it unsaved (no suite_id yet), as edited in the same form.
        try:
            return self.suite
        except EvalSuite.DoesNotExist:
            return None

    def clean(self):
        references_check(self)
        checks = [
            ("turns", lambda: _turns_check(self.turns)),
            ("expected_tool_calls", lambda: expected_calls_check(self.expected_tool_calls)),
            ("forbidden_tools", lambda: _names_check(self.forbidden_tools, "forbidden tools")),
            ("answer_pattern", lambda: self.answer_pattern and pattern_check(self.answer_pattern)),
            ("answer_schema", lambda: self.answer_schema is not None and schema_check(self.answer_schema)),
            ("tool_results", lambda: _tool_results_check(self.tool_results)),
            ("recorded_calls", lambda: recorded_calls_check(self.recorded_calls)),
            ("prior_conversations", lambda: _prior_conversations_check(self.prior_conversations)),
            ("remembered", lambda: _texts_check(self.remembered)),
            ("forgotten", lambda: _texts_check(self.forgotten)),
        ]
        errors = {}
        # PostgreSQL stores NUL in neither text nor jsonb: refused here, not failed on insert.
        for field in TEXT_AND_JSON_FIELDS:
            if contains_nul(getattr(self, field)):
                errors[field] = _("Must not contain the NUL character (U+0000).")
        for field, check in checks:
            if field in errors:
                continue
            try:
                check()
            except ExpectationInvalid as exc:
                errors[field] = str(exc)
        if self.expect_no_tool and self.expected_tool_calls:
            errors["expect_no_tool"] = _("A case cannot expect tool calls and no tool call at once.")
        if self.answer_rubric.strip() and self._suite() is not None and self._suite().judge_model_config_id is None:
            errors["answer_rubric"] = _("A rubric needs a judge model: choose one on the case's suite.")
        if errors:
            raise ValidationError(errors)


class EvalRunStatus(models.TextChoices):
    RUNNING = "running", _("Running")
    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")


class EvalRun(models.Model):
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "suite__workspace"
    suite = models.ForeignKey(EvalSuite, on_delete=models.PROTECT, related_name="eval_runs", verbose_name=_("suite"))
    agent_version = models.ForeignKey(
        "agents.AgentVersion", on_delete=models.PROTECT, related_name="eval_runs", verbose_name=_("agent version")
    )
    repetitions = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(20)], verbose_name=_("repetitions")
    )
    status = models.CharField(
        max_length=16, choices=EvalRunStatus.choices, default=EvalRunStatus.RUNNING, verbose_name=_("status")
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    # metrics.eval_metrics over the results, stored when the last run ended.
    metrics = models.JSONField(null=True, blank=True, verbose_name=_("metrics"))
    # Why a failed eval run could not be collected (evals.services.eval_run_collect).
    error = models.TextField(blank=True, default="", verbose_name=_("error"))
    started_at = models.DateTimeField(auto_now_add=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    class Meta:
        verbose_name = _("eval run")
        verbose_name_plural = _("eval runs")
        ordering = ["-started_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(repetitions__gte=1), name="eval_run_repetitions_positive")
        ]

    def __str__(self):
        return f"{self.suite} × {self.agent_version} ({self.status})"

    def clean(self):
        references_check(self)


class EvalResult(models.Model):
    """One repetition of one case: its run, and once the run ended, every check with its reason."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "eval_run__suite__workspace"
    eval_run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results", verbose_name=_("eval run"))
    case = models.ForeignKey(EvalCase, on_delete=models.PROTECT, related_name="results", verbose_name=_("case"))
    repetition = models.PositiveSmallIntegerField(verbose_name=_("repetition"))
    # No database constraint: retention deletes old runs with plain SQL (conversations.retention,
    # which cannot know this table), and the scores outlive the run they were read from.
    run = models.OneToOneField(
        "conversations.Run",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="eval_result",
        verbose_name=_("run"),
    )
    # Which of the case's conversations `run` is: its earlier ones first (EvalCase.prior_conversations),
    # then its own (the scored one), whose number is the count of earlier ones.
    session = models.PositiveSmallIntegerField(default=0, verbose_name=_("conversation"))
    # The runs of the earlier conversations, in order (their ids): the evidence of what was told.
    earlier_runs = models.JSONField(default=list, blank=True, verbose_name=_("earlier runs"))
    scored = models.BooleanField(default=False, verbose_name=_("scored"))
    passed = models.BooleanField(null=True, blank=True, verbose_name=_("passed"))
    # [{"kind": …, "passed": bool, "reason": …}, …] (scoring.score_run).
    checks = models.JSONField(default=list, blank=True, verbose_name=_("checks"))
    tool_calls = models.PositiveIntegerField(default=0, verbose_name=_("tool calls"))
    valid_tool_calls = models.PositiveIntegerField(default=0, verbose_name=_("valid tool calls"))
    model_turns = models.PositiveIntegerField(default=0, verbose_name=_("model turns"))
    total_tokens = models.PositiveIntegerField(default=0, verbose_name=_("total tokens"))
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=0, verbose_name=_("cost"))
    latency_ms = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("latency ms"))

    class Meta:
        verbose_name = _("eval result")
        verbose_name_plural = _("eval results")
        ordering = ["eval_run", "case__position", "case_id", "repetition"]
        constraints = [
            models.UniqueConstraint(fields=["eval_run", "case", "repetition"], name="eval_result_unique"),
        ]

    def __str__(self):
        return f"{self.case} #{self.repetition}"


class ReleaseGate(models.Model):
    """An agent's release gate: a version goes live (published, or promoted from a canary) only
    after a finished run of this suite on it that does not regress against the published
    version's beyond the thresholds (evals.gate)."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    agent = models.OneToOneField(
        "agents.Agent", on_delete=models.CASCADE, related_name="release_gate", verbose_name=_("agent")
    )
    suite = models.ForeignKey(EvalSuite, on_delete=models.PROTECT, related_name="gates", verbose_name=_("suite"))
    repetitions = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(20)],
        verbose_name=_("repetitions"),
        help_text=_("The eval runs compared are those with this many repetitions."),
    )
    max_rate_drop = models.FloatField(
        default=DEFAULT_MAX_RATE_DROP,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        verbose_name=_("largest rate drop"),
        help_text=_("A rate (completion, tool hit, pass@k…) or a case's pass rate falling by more than this blocks."),
    )
    max_cost_increase = models.FloatField(
        default=DEFAULT_MAX_COST_INCREASE,
        validators=[MinValueValidator(0)],
        verbose_name=_("largest cost increase"),
        help_text=_("Turns, tokens or cost rising by more than this fraction blocks."),
    )
    max_latency_increase = models.FloatField(
        default=DEFAULT_MAX_LATENCY_INCREASE,
        validators=[MinValueValidator(0)],
        verbose_name=_("largest latency increase"),
        help_text=_(
            "Latency (p50 or p95) rising by more than this fraction blocks. Generous by default: two eval runs "
            "of one version on a busy machine differ in latency by more than they do in cost."
        ),
    )
    replay_hours = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(24 * 30)],
        verbose_name=_("replay hours"),
        help_text=_(
            "0: off. Otherwise a release also needs the agent's production runs of the last this many hours "
            "replayed on the candidate and on the published version, with no regression beyond the thresholds."
        ),
    )
    online_min_runs = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(100_000)],
        verbose_name=_("online scores needed"),
        help_text=_(
            "0: off. Otherwise promoting a canary also needs at least this many online scores of the candidate's "
            "live traffic since the canary started, and no evaluator's average falling by more than the largest "
            "rate drop against the published version's over the same time."
        ),
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))

    class Meta:
        verbose_name = _("release gate")
        verbose_name_plural = _("release gates")

    def __str__(self):
        return f"{self.agent} ← {self.suite}"

    def clean(self):
        references_check(self)


class OnlineEvaluator(models.Model):
    """A check of an agent's completed production runs (docs/quality.md): a rule, or a judge
    model with a rubric, on a sampled share of them, and on every run with negative feedback or a
    guardrail hit where asked. Each check made is an OnlineScore (evals.online)."""

    class Kind(models.TextChoices):
        SCHEMA = "schema", _("Answer matches a JSON Schema")
        REGEX = "regex", _("Answer matches a pattern")
        TOOL_USED = "tool_used", _("A tool was used")
        LATENCY = "latency", _("Latency under a ceiling")
        COST = "cost", _("Cost under a ceiling")
        JUDGE = "judge", _("Judge model with a rubric")

    # Its workspace is its agent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="online_evaluators", verbose_name=_("agent")
    )
    # Only the runs of this version; null: every version's.
    version = models.ForeignKey(
        "agents.AgentVersion",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("version"),
        help_text=_("Only this version's runs. Leave empty for every version."),
    )
    name = models.CharField(max_length=100, verbose_name=_("name"))
    kind = models.CharField(max_length=16, choices=Kind.choices, verbose_name=_("kind"))
    # What the rule needs: {"schema": {...}} (empty: the agent's output schema), {"pattern": "..."},
    # {"tool": "name"}, {"max_ms": 5000}, {"max_cost": "0.01"}; a judge's {"pass_score": 0.5} (optional).
    config = models.JSONField(default=dict, blank=True, verbose_name=_("configuration"))
    judge_model = models.ForeignKey(
        "agents.ModelConfig",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("judge model"),
    )
    rubric = models.TextField(blank=True, default="", verbose_name=_("rubric"))
    sample_rate = models.FloatField(
        default=0.1,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        verbose_name=_("sample rate"),
        help_text=_("The share of completed runs checked, from 0 to 1."),
    )
    # The runs sampled are those whose id is below this: run ids are random (uuid4), so
    # sample_rate of them, always the same ones (evals.online). Kept with sample_rate by save().
    sample_below = models.UUIDField(default=uuid.UUID(int=0), editable=False, verbose_name=_("sampled below"))
    on_negative_feedback = models.BooleanField(
        default=True, verbose_name=_("every run with negative feedback"), help_text=_("Also check every such run.")
    )
    on_guardrail_hit = models.BooleanField(
        default=True, verbose_name=_("every run with a guardrail hit"), help_text=_("Also check every such run.")
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("online evaluator")
        verbose_name_plural = _("online evaluators")
        ordering = ["agent", "name"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="online_evaluator_name_unique"),
            models.CheckConstraint(
                condition=models.Q(sample_rate__gte=0, sample_rate__lte=1), name="online_evaluator_rate_range"
            ),
        ]

    def __str__(self):
        return self.name

    def save(self, *args, **kwargs):
        # Derived from sample_rate, as a column the ledger's listener can compare run ids with.
        self.sample_below = sample_bound(self.sample_rate)
        if kwargs.get("update_fields") is not None and "sample_rate" in kwargs["update_fields"]:
            kwargs["update_fields"] = {*kwargs["update_fields"], "sample_below"}
        super().save(*args, **kwargs)

    def clean(self):
        references_check(self)
        errors = {}
        if (
            self.version_id is not None
            and self.agent_id is not None
            and not AgentVersion.objects.filter(pk=self.version_id, agent_id=self.agent_id).exists()
        ):
            errors["version"] = _("Choose a version of this agent.")
        try:
            online_config_check(self.kind, self.config)
        except ExpectationInvalid as exc:
            errors["config"] = str(exc)
        if self.kind == self.Kind.JUDGE:
            if self.judge_model_id is None:
                errors["judge_model"] = _("A judge needs a judge model.")
            if not self.rubric.strip():
                errors["rubric"] = _("A judge needs a rubric.")
        if errors:
            raise ValidationError(errors)


UUID_SPACE = 2**128


def sample_bound(rate: float) -> uuid.UUID:
    """The id below which a run is sampled at `rate` (0 to 1) of them."""
    return uuid.UUID(int=min(max(int(rate * UUID_SPACE), 0), UUID_SPACE - 1))


def _number(config: dict, key: str, *, whole: bool) -> None:
    value = config.get(key)
    if isinstance(value, str) and not whole:
        try:
            value = float(value)
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float) or not 0 <= value < 1e12:
        raise ExpectationInvalid(f'{{"{key}": ...}} must be a {"whole " if whole else ""}number of at least 0')


def online_config_check(kind: str, config) -> None:
    """ExpectationInvalid unless `config` is what an evaluator of `kind` needs (the model's
    comment on `config` lists them)."""
    kinds = OnlineEvaluator.Kind
    keys = {
        kinds.SCHEMA: {"schema"},
        kinds.REGEX: {"pattern"},
        kinds.TOOL_USED: {"tool"},
        kinds.LATENCY: {"max_ms"},
        kinds.COST: {"max_cost"},
        kinds.JUDGE: {"pass_score"},
    }.get(kind, set())
    if not isinstance(config, dict):
        raise ExpectationInvalid("the configuration is a JSON object")
    if set(config) - keys:
        raise ExpectationInvalid(f"unknown keys for this kind: {', '.join(sorted(set(config) - keys))}")
    if kind == kinds.SCHEMA and config.get("schema") is not None:
        schema_check(config["schema"])
    elif kind == kinds.REGEX:
        if not isinstance(config.get("pattern"), str) or not config["pattern"]:
            raise ExpectationInvalid('{"pattern": "..."} is needed')
        pattern_check(config["pattern"])
    elif kind == kinds.TOOL_USED and (not isinstance(config.get("tool"), str) or not config["tool"].strip()):
        raise ExpectationInvalid('{"tool": "name"} is needed')
    elif kind == kinds.LATENCY:
        _number(config, "max_ms", whole=True)
    elif kind == kinds.COST:
        _number(config, "max_cost", whole=False)
    elif kind == kinds.JUDGE and "pass_score" in config:
        score = config["pass_score"]
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            raise ExpectationInvalid('{"pass_score": ...} is a number from 0 to 1')


class OnlineScore(models.Model):
    """One online evaluator's score of one production run: why the run was checked, the score
    (0 to 1) and whether it passed, and the judge's call where a model judged (its cost stays out
    of the run's totals)."""

    class Reason(models.TextChoices):
        SAMPLE = "sample", _("Sampled")
        NEGATIVE_FEEDBACK = "negative_feedback", _("Negative feedback")
        GUARDRAIL = "guardrail", _("Guardrail hit")

    # Its workspace is its evaluator's agent's (workspaces.access.in_workspace).
    workspace_path = "evaluator__agent__workspace"
    evaluator = models.ForeignKey(
        OnlineEvaluator, on_delete=models.CASCADE, related_name="scores", verbose_name=_("evaluator")
    )
    # No database constraint: retention deletes old runs with plain SQL (conversations.retention),
    # and a score outlives the run it was read from, as an eval result does.
    run = models.ForeignKey(
        "conversations.Run",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="online_scores",
        verbose_name=_("run"),
    )
    # The run's version, copied so the dashboard groups scores by version without the runs.
    agent_version = models.ForeignKey(
        "agents.AgentVersion",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        related_name="+",
        verbose_name=_("version"),
    )
    reason = models.CharField(max_length=20, choices=Reason.choices, verbose_name=_("reason"))
    score = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(1)], verbose_name=_("score")
    )
    passed = models.BooleanField(null=True, blank=True, verbose_name=_("passed"))
    explanation = models.TextField(blank=True, default="", verbose_name=_("explanation"))
    # The judge's call (LLMCall purpose online_judge); null for rules.
    llm_call = models.ForeignKey(
        "conversations.LLMCall",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("judge call"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("online score")
        verbose_name_plural = _("online scores")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["evaluator", "run"], name="online_score_once_per_run"),
        ]
        indexes = [models.Index(fields=["evaluator", "created_at"], name="online_score_evaluator_idx")]

    def __str__(self):
        return f"{self.evaluator} #{self.run_id}"
