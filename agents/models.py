import zoneinfo

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from agents.providers.parameters import agent_problems, parameter_problems
from platform_site.crypto import EncryptedTextField
from tools.approval_policy import validate_rule


class ProviderKind(models.TextChoices):
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible"
    ANTHROPIC = "anthropic", "Anthropic Messages"


class ResponseFormat(models.TextChoices):
    TEXT = "text", "text"
    JSON_OBJECT = "json_object", "any JSON object"
    JSON_SCHEMA = "json_schema", "JSON matching a schema"


class Thinking(models.TextChoices):
    DEFAULT = "", "provider default (not sent)"
    ENABLED = "enabled", "enabled"
    DISABLED = "disabled", "disabled"
    AUTO = "auto", "auto (model decides)"


class ReasoningEffort(models.TextChoices):
    DEFAULT = "", "provider default (not sent)"
    LOW = "low", "low"
    MEDIUM = "medium", "medium"
    HIGH = "high", "high"


class ModelConfig(models.Model):
    """How to reach one model: endpoint, credentials, sampling parameters and prices."""

    name = models.CharField(max_length=100, unique=True)
    provider = models.CharField(max_length=32, choices=ProviderKind.choices, default=ProviderKind.OPENAI_COMPATIBLE)
    base_url = models.URLField(
        max_length=500,
        help_text="Up to and including the version, e.g. https://api.openai.com/v1 or https://api.anthropic.com/v1.",
    )
    api_key = EncryptedTextField(blank=True, default="")
    model = models.CharField(max_length=200, help_text="Model name sent to the provider.")
    temperature = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(2)])
    top_p = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(1)])
    # Zero would ask for an empty answer on every call; the database refuses it too.
    max_tokens = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    context_window = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(256)],
        help_text="Tokens the model's context holds (prompt and answer), e.g. 4096 for a small llama.cpp model. "
        "When set, older turns are summarised so requests fit, and max tokens is capped to what is left.",
    )
    frequency_penalty = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(-2), MaxValueValidator(2)]
    )
    presence_penalty = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(-2), MaxValueValidator(2)]
    )
    seed = models.BigIntegerField(null=True, blank=True)
    stop = models.JSONField(default=list, blank=True, help_text='Stop sequences, e.g. ["\\n\\nUser:"].')
    response_format = models.CharField(max_length=16, choices=ResponseFormat.choices, default=ResponseFormat.TEXT)
    response_schema = models.JSONField(
        null=True, blank=True, help_text="The JSON Schema answers must match (response format: JSON matching a schema)."
    )
    thinking = models.CharField(
        max_length=16,
        choices=Thinking.choices,
        blank=True,
        default=Thinking.DEFAULT,
        help_text="Reasoning / thinking mode (seed 000's thinking_type; Anthropic extended thinking).",
    )
    thinking_budget_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Anthropic: tokens the model may think for (at least 1024, below max tokens).",
    )
    reasoning_effort = models.CharField(
        max_length=16,
        choices=ReasoningEffort.choices,
        blank=True,
        default=ReasoningEffort.DEFAULT,
        help_text="OpenAI-style reasoning models: how hard to think.",
    )
    stream = models.BooleanField(default=False)
    stream_tools_unsupported = models.BooleanField(
        default=False,
        verbose_name="streaming with tools unsupported",
        help_text="Learned: set when the server refused a streamed request with tools (llama.cpp does); such "
        "requests are then sent unstreamed. Clear it to try streaming again.",
    )
    extra_params = models.JSONField(
        default=dict,
        blank=True,
        help_text='Provider-specific request fields merged into each call, e.g. {"thinking": {"type": "disabled"}}.',
    )
    connect_timeout_seconds = models.FloatField(default=10, validators=[MinValueValidator(0.1)])
    read_timeout_seconds = models.FloatField(default=120, validators=[MinValueValidator(0.1)])
    max_retries = models.PositiveSmallIntegerField(default=2, validators=[MaxValueValidator(10)])
    price_input_per_million = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    price_output_per_million = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    price_cached_input_per_million = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(max_tokens__isnull=True) | models.Q(max_tokens__gte=1),
                name="model_config_max_tokens_positive",
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.model})"

    def clean(self):
        problems = parameter_problems(provider=self.provider, params=self.__dict__)
        if self.context_window and self.max_tokens and self.max_tokens >= self.context_window:
            problems["max_tokens"] = _("Max tokens must be below the context window, which also holds the prompt.")
        if not problems and self.pk and self.provider == ProviderKind.ANTHROPIC and self.thinking == Thinking.ENABLED:
            forced = Agent.objects.filter(
                models.Q(model_config=self) | models.Q(fallback_model_config=self),
                tool_choice__in=[ToolChoice.REQUIRED, ToolChoice.TOOL],
            ).values_list("name", flat=True)
            if forced:
                problems["thinking"] = (
                    "Anthropic extended thinking allows only tool choice auto or none, and these agents force a "
                    f"tool: {', '.join(forced)}."
                )
        if problems:
            raise ValidationError(problems)


class ToolChoice(models.TextChoices):
    AUTO = "auto", "auto"
    NONE = "none", "none"
    REQUIRED = "required", "required"
    TOOL = "tool", "the named tool"


class ConcurrentMessages(models.TextChoices):
    REJECT = "reject", "reject (409 while a run is active)"
    ENQUEUE = "enqueue", "enqueue (the new run waits for the active one)"
    INTERRUPT = "interrupt", "interrupt (cancel the active run, then start)"


def validate_time_zone(value: str) -> None:
    if value not in zoneinfo.available_timezones():
        raise ValidationError(f"Unknown time zone {value!r}; use an IANA name such as Asia/Shanghai.")


class Agent(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    system_prompt = models.TextField(
        blank=True,
        help_text=(
            "Django template. Variables: {{ now_cn }} (2026年02月28日 15时05分30秒 星期六), "
            "{{ now }}, {{ date }}, {{ time }}, {{ weekday }}, {{ agent_name }}."
        ),
    )
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    model_config = models.ForeignKey(ModelConfig, on_delete=models.PROTECT, related_name="agents")
    fallback_model_config = models.ForeignKey(
        ModelConfig, on_delete=models.PROTECT, null=True, blank=True, related_name="fallback_for"
    )
    tools = models.ManyToManyField("tools.ToolDefinition", through="AgentTool", blank=True)
    max_iterations = models.PositiveSmallIntegerField(
        default=8,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Model calls per run before the run stops with an explanation.",
    )
    max_same_tool_streak = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1)],
        help_text="Consecutive steps calling the same tool before the call is refused.",
    )
    tool_choice = models.CharField(
        max_length=16,
        choices=ToolChoice.choices,
        default=ToolChoice.AUTO,
        help_text="'required' and a named tool apply until the run has called a tool; then the model may answer.",
    )
    tool_choice_name = models.CharField(
        max_length=200, blank=True, default="", help_text="The tool to call when tool choice is 'the named tool'."
    )
    parallel_tool_calls = models.BooleanField(default=True)
    # Context policy (seeds 001 §6.3, 003 §3.4, 004 §2.4).
    context_max_turns = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Only the last N turns (a user message and what followed it) are sent.",
    )
    context_tool_result_max_chars = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(100)],
        help_text="Tool results longer than this are cut when sent again in later steps.",
    )
    context_token_budget = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(500)],
        help_text="When the context would exceed this (estimated) many tokens, earlier turns are summarised.",
    )
    # Budgets: reaching one ends the run with an explanation (stop reason budget or timeout).
    run_token_budget = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens one run may use.")
    run_cost_budget = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="Cost one run may incur."
    )
    run_timeout_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Wall-clock deadline of a run from its creation, including time queued or awaiting approval.",
    )
    daily_token_budget = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens this agent may use per day (in the agent's time zone)."
    )
    daily_cost_budget = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True, help_text="Cost this agent may incur per day."
    )
    is_active = models.BooleanField(default=True)
    # API access and conversation policy.
    allowed_groups = models.ManyToManyField(
        "auth.Group",
        blank=True,
        related_name="+",
        help_text="Who may use this agent through the API. Empty: every user.",
    )
    concurrent_messages = models.CharField(
        max_length=16,
        choices=ConcurrentMessages.choices,
        default=ConcurrentMessages.REJECT,
        help_text="What a new message does while the conversation still has an active run.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return self.name

    def clean(self):
        if self.tool_choice == ToolChoice.TOOL and not self.tool_choice_name:
            raise ValidationError({"tool_choice_name": "Name the tool the model must call."})
        if self.tool_choice != ToolChoice.TOOL and self.tool_choice_name:
            raise ValidationError(
                {"tool_choice_name": "Only used when tool choice is 'the named tool'; leave it empty."}
            )
        problems = agent_problems(
            tool_choice=self.tool_choice,
            models=[
                m
                for m in (self.model_config if self.model_config_id else None, self.fallback_model_config)
                if m is not None
            ],
        )
        if problems:
            raise ValidationError(problems)


class AgentTool(models.Model):
    """An agent's use of a tool; the approval policy can be overridden per agent."""

    class Approval(models.TextChoices):
        INHERIT = "inherit", "as the tool says"
        NEVER = "never", "never"
        ALWAYS = "always", "always"
        RULE = "rule", "when the rule matches"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="agent_tools")
    tool = models.ForeignKey("tools.ToolDefinition", on_delete=models.PROTECT, related_name="agent_tools")
    approval = models.CharField(max_length=16, choices=Approval.choices, default=Approval.INHERIT)
    approval_rule = models.CharField(
        max_length=500,
        blank=True,
        help_text="With 'when the rule matches', e.g. amount > 1000.",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "tool"], name="agent_tool_unique")]

    def __str__(self):
        return f"{self.agent} → {self.tool}"

    def clean(self):
        if self.approval == self.Approval.RULE:
            try:
                validate_rule(self.approval_rule, self.tool.parameters if self.tool_id else None)
            except ValidationError as exc:
                raise ValidationError({"approval_rule": exc.messages}) from exc


class AgentVersion(models.Model):
    """Immutable snapshot of everything a run needs to know about its agent.

    Runs point here, so editing an agent, its model or its tools never changes what an old
    run ran with. A new version is written only when the snapshot's hash changes.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    config_hash = models.CharField(max_length=64)
    snapshot = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "number"], name="agent_version_number_unique"),
        ]
        indexes = [models.Index(fields=["agent", "config_hash"])]

    def __str__(self):
        return f"{self.agent} v{self.number}"


class AgentUsageDay(models.Model):
    """Tokens and cost an agent used on one day (its time zone), for daily budgets and reports.

    Bumped by an upsert in the same transaction as each completed model call, so it always
    equals the sum over that day's LLMCall rows and a budget check is one indexed read.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="usage_days")
    day = models.DateField()
    total_tokens = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=16, decimal_places=8, default=0)
    calls = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = _("daily agent usage")
        verbose_name_plural = _("daily agent usage")
        constraints = [models.UniqueConstraint(fields=["agent", "day"], name="agent_usage_day_unique")]

    def __str__(self):
        return f"{self.agent_id} {self.day}"
