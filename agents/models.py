import zoneinfo

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, validate_email
from django.db import models
from django.utils.translation import gettext_lazy as _

from agents import guardrails
from agents.delegation import chain_problem
from agents.output_schema import OutputSchemaInvalid, output_schema_check
from agents.providers.parameters import agent_problems, parameter_problems
from platform_site.crypto import EncryptedTextField
from tools.approval_policy import validate_rule
from tools.models import tool_name_validator
from workspaces.defaults import InWorkspace
from workspaces.names import name_unique_in_workspace
from workspaces.references import references_check


class ProviderKind(models.TextChoices):
    OPENAI_COMPATIBLE = "openai_compatible", _("OpenAI-compatible")
    ANTHROPIC = "anthropic", _("Anthropic Messages")


class ResponseFormat(models.TextChoices):
    TEXT = "text", _("text")
    JSON_OBJECT = "json_object", _("any JSON object")
    JSON_SCHEMA = "json_schema", _("JSON matching a schema")


class Thinking(models.TextChoices):
    DEFAULT = "", _("provider default (not sent)")
    ENABLED = "enabled", _("enabled")
    DISABLED = "disabled", _("disabled")
    AUTO = "auto", _("auto (model decides)")


class ReasoningEffort(models.TextChoices):
    DEFAULT = "", _("provider default (not sent)")
    LOW = "low", _("low")
    MEDIUM = "medium", _("medium")
    HIGH = "high", _("high")


class PromptCaching(models.TextChoices):
    """What a request asks of the provider's prompt cache (docs/engine.md, Prompt caching)."""

    AUTO = "auto", _("auto: Anthropic breakpoints; prompt_cache_key to OpenAI itself only")
    ON = "on", _("on: also prompt_cache_key to any OpenAI-compatible server")
    OFF = "off", _("off: nothing about caching is sent")


INPUT_KINDS = ("text", "image", "audio", "file")


def input_kinds_default() -> list[str]:
    return ["text"]


def validate_input_kinds(value) -> None:
    if not isinstance(value, list) or not all(isinstance(kind, str) for kind in value):
        raise ValidationError(_('A list of kinds, e.g. ["text", "image"].'))
    unknown = [kind for kind in value if kind not in INPUT_KINDS]
    if unknown or "text" not in value or len(set(value)) != len(value):
        raise ValidationError(
            _("Name each kind once, text included, from: %(known)s.") % {"known": ", ".join(INPUT_KINDS)}
        )


class ModelPurpose(models.TextChoices):
    # A chat model: an agent's, a fallback, a moderator, a describer of images.
    CHAT = "chat", _("chat")
    # A speech-to-text model behind OpenAI's POST /audio/transcriptions (whisper and its kin):
    # only an agent's transcription of audio parts uses it (engine.part_conversion).
    TRANSCRIPTION = "transcription", _("transcription")


class ModelConfig(InWorkspace):
    """How to reach one model: endpoint, credentials, sampling parameters and prices."""

    name = models.CharField(_("name"), max_length=100)
    purpose = models.CharField(
        _("purpose"),
        max_length=16,
        choices=ModelPurpose.choices,
        default=ModelPurpose.CHAT,
        help_text=_(
            "Chat: answers messages. Transcription: turns audio into text (OpenAI's /audio/transcriptions), "
            "for agents whose model does not take audio."
        ),
    )
    provider = models.CharField(
        _("provider"), max_length=32, choices=ProviderKind.choices, default=ProviderKind.OPENAI_COMPATIBLE
    )
    base_url = models.URLField(
        _("base url"),
        max_length=500,
        help_text=_("Up to and including the version, e.g. https://api.openai.com/v1 or https://api.anthropic.com/v1."),
    )
    api_key = EncryptedTextField(_("api key"), blank=True, default="")
    model = models.CharField(_("model"), max_length=200, help_text=_("Model name sent to the provider."))
    temperature = models.FloatField(
        _("temperature"), null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(2)]
    )
    top_p = models.FloatField(
        _("top p"), null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(1)]
    )
    # Zero would ask for an empty answer on every call; the database refuses it too.
    max_tokens = models.PositiveIntegerField(_("max tokens"), null=True, blank=True, validators=[MinValueValidator(1)])
    context_window = models.PositiveIntegerField(
        _("context window"),
        null=True,
        blank=True,
        validators=[MinValueValidator(256)],
        help_text=_(
            "Tokens the model's context holds (prompt and answer), e.g. 4096 for a small llama.cpp model. "
            "When set, older turns are summarised so requests fit, and max tokens is capped to what is left."
        ),
    )
    frequency_penalty = models.FloatField(
        _("frequency penalty"), null=True, blank=True, validators=[MinValueValidator(-2), MaxValueValidator(2)]
    )
    presence_penalty = models.FloatField(
        _("presence penalty"), null=True, blank=True, validators=[MinValueValidator(-2), MaxValueValidator(2)]
    )
    seed = models.BigIntegerField(_("seed"), null=True, blank=True)
    stop = models.JSONField(_("stop"), default=list, blank=True, help_text=_('Stop sequences, e.g. ["\\n\\nUser:"].'))
    response_format = models.CharField(
        _("response format"), max_length=16, choices=ResponseFormat.choices, default=ResponseFormat.TEXT
    )
    response_schema = models.JSONField(
        _("response schema"),
        null=True,
        blank=True,
        help_text=_("The JSON Schema answers must match (response format: JSON matching a schema)."),
    )
    structured_output = models.BooleanField(
        _("structured output"),
        default=False,
        help_text=_(
            "The server can hold an answer to a JSON Schema (OpenAI-compatible response_format json_schema, as "
            "OpenAI, vLLM and llama.cpp's server do). The platform's own calls that expect JSON (memory "
            "extraction) then ask for it; the agent's answers follow the response format above."
        ),
    )
    # What the model takes in a message besides text (attachments.parts): a part of a kind it
    # does not take is refused when posted, or turned into text first where the agent says how
    # (agents.Agent's conversions).
    input_kinds = models.JSONField(
        _("input kinds"),
        default=input_kinds_default,
        blank=True,
        validators=[validate_input_kinds],
        help_text=_('What the model takes in a message: a list of "text", "image", "audio", "file".'),
    )
    thinking = models.CharField(
        _("thinking"),
        max_length=16,
        choices=Thinking.choices,
        blank=True,
        default=Thinking.DEFAULT,
        help_text=_("Reasoning / thinking mode (seed 000's thinking_type; Anthropic extended thinking)."),
    )
    thinking_budget_tokens = models.PositiveIntegerField(
        _("thinking budget tokens"),
        null=True,
        blank=True,
        help_text=_("Anthropic: tokens the model may think for (at least 1024, below max tokens)."),
    )
    reasoning_effort = models.CharField(
        _("reasoning effort"),
        max_length=16,
        choices=ReasoningEffort.choices,
        blank=True,
        default=ReasoningEffort.DEFAULT,
        help_text=_("OpenAI-style reasoning models: how hard to think."),
    )
    stream = models.BooleanField(_("stream"), default=False)
    stream_tools_unsupported = models.BooleanField(
        default=False,
        verbose_name=_("streaming with tools unsupported"),
        help_text=_(
            "Learned: set when the server refused a streamed request with tools (llama.cpp does); such "
            "requests are then sent unstreamed. Clear it to try streaming again."
        ),
    )
    prompt_caching = models.CharField(
        _("prompt caching"),
        max_length=8,
        choices=PromptCaching.choices,
        default=PromptCaching.AUTO,
        help_text=_(
            "Anthropic: cache_control breakpoints on the tools, the system prompt, the memories and the "
            "conversation. OpenAI-compatible: a prompt_cache_key per agent version, sent to api.openai.com "
            "on auto; a server that refuses unknown fields needs auto or off."
        ),
    )
    extra_params = models.JSONField(
        _("extra params"),
        default=dict,
        blank=True,
        help_text=_('Provider-specific request fields merged into each call, e.g. {"thinking": {"type": "disabled"}}.'),
    )
    connect_timeout_seconds = models.FloatField(
        _("connect timeout seconds"), default=10, validators=[MinValueValidator(0.1)]
    )
    read_timeout_seconds = models.FloatField(
        _("read timeout seconds"), default=120, validators=[MinValueValidator(0.1)]
    )
    max_retries = models.PositiveSmallIntegerField(_("max retries"), default=2, validators=[MaxValueValidator(10)])
    price_input_per_million = models.DecimalField(
        _("price input per million"), max_digits=12, decimal_places=6, default=0
    )
    price_output_per_million = models.DecimalField(
        _("price output per million"), max_digits=12, decimal_places=6, default=0
    )
    price_cached_input_per_million = models.DecimalField(
        _("price cached input per million"), max_digits=12, decimal_places=6, default=0
    )
    # Anthropic charges writing a prompt to its cache at 1.25 times the input price.
    price_cache_write_per_million = models.DecimalField(
        _("price cache write per million"),
        max_digits=12,
        decimal_places=6,
        default=0,
        help_text=_("Prompt tokens written to the cache (Anthropic); 0 prices them as input tokens."),
    )
    # Images are input tokens to every provider we speak to; audio is priced apart by some.
    price_audio_input_per_million = models.DecimalField(
        _("price audio input per million"),
        max_digits=12,
        decimal_places=6,
        default=0,
        help_text=_("Audio input tokens; 0 prices them as input tokens."),
    )
    # Speech-to-text is billed by the minute of audio (OpenAI's whisper), not by the token.
    price_audio_per_minute = models.DecimalField(
        _("price per audio minute"),
        max_digits=12,
        decimal_places=6,
        default=0,
        help_text=_("Transcription: the price of a minute of audio (the clip's duration, to the second)."),
    )
    # Learned (agents.providers.calibration): over the calls whose server reported usage, what it
    # reported and what the estimate rule said, summed; estimates for calls reporting none are
    # scaled by their quotients. Written by the engine only, never by a form.
    calibration_calls = models.PositiveIntegerField(_("calibration calls"), default=0, editable=False)
    prompt_tokens_reported = models.BigIntegerField(_("prompt tokens reported"), default=0, editable=False)
    prompt_tokens_estimated = models.BigIntegerField(_("prompt tokens estimated"), default=0, editable=False)
    completion_tokens_reported = models.BigIntegerField(_("completion tokens reported"), default=0, editable=False)
    completion_tokens_estimated = models.BigIntegerField(_("completion tokens estimated"), default=0, editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("model config")
        verbose_name_plural = _("model configs")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(max_tokens__isnull=True) | models.Q(max_tokens__gte=1),
                name="model_config_max_tokens_positive",
            ),
            name_unique_in_workspace("model_config_name_per_workspace"),
        ]

    def __str__(self):
        return f"{self.name} ({self.model})"

    def clean(self):
        problems = parameter_problems(provider=self.provider, params=self.__dict__)
        if self.context_window and self.max_tokens and self.max_tokens >= self.context_window:
            problems["max_tokens"] = _("Max tokens must be below the context window, which also holds the prompt.")
        if self.structured_output and self.provider == ProviderKind.ANTHROPIC:
            problems["structured_output"] = _("Anthropic Messages has no JSON Schema response format.")
        if self.purpose == ModelPurpose.TRANSCRIPTION and self.provider != ProviderKind.OPENAI_COMPATIBLE:
            problems["purpose"] = _("Transcription is OpenAI's /audio/transcriptions: use an OpenAI-compatible server.")
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
    AUTO = "auto", _("auto")
    NONE = "none", _("none")
    REQUIRED = "required", _("required")
    TOOL = "tool", _("the named tool")


class ConcurrentMessages(models.TextChoices):
    REJECT = "reject", _("reject (409 while a run is active)")
    ENQUEUE = "enqueue", _("enqueue (the new run waits for the active one)")
    INTERRUPT = "interrupt", _("interrupt (cancel the active run, then start)")


class AudioParts(models.TextChoices):
    REFUSE = "refuse", _("refuse (400 when posted)")
    TRANSCRIBE = "transcribe", _("transcribe (with the transcription model)")


class ImageParts(models.TextChoices):
    REFUSE = "refuse", _("refuse (400 when posted)")
    OCR = "ocr", _("read its text (OCR on the worker's CPU)")
    DESCRIBE = "describe", _("describe (with the description model)")


class FileParts(models.TextChoices):
    REFUSE = "refuse", _("refuse (400 when posted)")
    EXTRACT = "extract", _("extract its text (PDF, Word, Excel, PowerPoint, CSV, text)")


# The kinds of long-term memory an agent may keep: memory.models.MemoryKind's values, named here
# because the memory app sits above this one (tests/unit/test_memory_kinds.py checks they agree).
MEMORY_KINDS = {"fact": _("Fact"), "preference": _("Preference"), "event": _("Event"), "instruction": _("Instruction")}


def memory_kinds_problem(kinds) -> str | None:
    """What is wrong with an agent's memory kinds (a list of known kinds, each once), or None."""
    if not isinstance(kinds, list) or not all(isinstance(kind, str) for kind in kinds):
        return _('A list of kinds, e.g. ["fact", "preference"].')
    unknown = [kind for kind in kinds if kind not in MEMORY_KINDS]
    if unknown:
        return _("Unknown kinds: %(kinds)s. Known: %(known)s.") % {
            "kinds": ", ".join(unknown),
            "known": ", ".join(MEMORY_KINDS),
        }
    if len(set(kinds)) != len(kinds):
        return _("Name each kind once.")
    return None


def validate_time_zone(value: str) -> None:
    if value not in zoneinfo.available_timezones():
        raise ValidationError(f"Unknown time zone {value!r}; use an IANA name such as Asia/Shanghai.")


# An approval that waited a week has long since expired or been forgotten; as alerts' ages.
ESCALATION_MAX_MINUTES = 7 * 24 * 60


def email_list(text: str) -> list[str]:
    """Addresses written one per line or separated by commas (as AlertRule.email_to is)."""
    return [address for address in text.replace(",", "\n").split() if address]


def validate_email_list(value: str) -> None:
    for address in email_list(value):
        try:
            validate_email(address)
        except ValidationError:
            raise ValidationError(_("%(address)s is not an email address.") % {"address": address[:100]}) from None


class Agent(InWorkspace):
    name = models.CharField(_("name"), max_length=200)
    slug = models.SlugField(_("slug"), max_length=100, unique=True)
    description = models.TextField(_("description"), blank=True)
    system_prompt = models.TextField(
        _("system prompt"),
        blank=True,
        help_text=(
            _(
                "Django template. Variables: {{ now_cn }} (2026年02月28日 15时05分30秒 星期六), "
                "{{ now }}, {{ date }}, {{ time }}, {{ weekday }}, {{ agent_name }}."
            )
        ),
    )
    time_zone = models.CharField(_("time zone"), max_length=64, default="UTC", validators=[validate_time_zone])
    language = models.CharField(
        _("language"),
        max_length=16,
        choices=settings.LANGUAGES,
        default="en",
        help_text=_(
            "The language of what the platform itself tells this agent's users, such as why a run stopped. "
            "The model answers in whatever language its prompt and the user lead it to."
        ),
    )
    model_config = models.ForeignKey(
        ModelConfig, on_delete=models.PROTECT, related_name="agents", verbose_name=_("model config")
    )
    fallback_model_config = models.ForeignKey(
        ModelConfig,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="fallback_for",
        verbose_name=_("fallback model config"),
    )
    tools = models.ManyToManyField("tools.ToolDefinition", through="AgentTool", blank=True, verbose_name=_("tools"))
    max_iterations = models.PositiveSmallIntegerField(
        _("max iterations"),
        default=8,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text=_("Model calls per run before the run stops with an explanation."),
    )
    max_same_tool_streak = models.PositiveSmallIntegerField(
        _("max same tool streak"),
        default=3,
        validators=[MinValueValidator(1)],
        help_text=_("Consecutive steps calling the same tool before the call is refused."),
    )
    tool_choice = models.CharField(
        _("tool choice"),
        max_length=16,
        choices=ToolChoice.choices,
        default=ToolChoice.AUTO,
        help_text=_("'required' and a named tool apply until the run has called a tool; then the model may answer."),
    )
    tool_choice_name = models.CharField(
        _("tool choice name"),
        max_length=200,
        blank=True,
        default="",
        help_text=_("The tool to call when tool choice is 'the named tool'."),
    )
    parallel_tool_calls = models.BooleanField(_("parallel tool calls"), default=True)
    # Context policy (seeds 001 §6.3, 003 §3.4, 004 §2.4).
    context_max_turns = models.PositiveSmallIntegerField(
        _("context max turns"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Only the last N turns (a user message and what followed it) are sent."),
    )
    context_tool_result_max_chars = models.PositiveIntegerField(
        _("context tool result max chars"),
        null=True,
        blank=True,
        validators=[MinValueValidator(100)],
        help_text=_("Tool results longer than this are cut when sent again in later steps."),
    )
    context_token_budget = models.PositiveIntegerField(
        _("context token budget"),
        null=True,
        blank=True,
        validators=[MinValueValidator(500)],
        help_text=_("When the context would exceed this (estimated) many tokens, earlier turns are summarised."),
    )
    # Budgets: reaching one ends the run with an explanation (stop reason budget or timeout).
    run_token_budget = models.PositiveIntegerField(
        _("run token budget"), null=True, blank=True, help_text=_("Tokens one run may use.")
    )
    run_cost_budget = models.DecimalField(
        _("run cost budget"),
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text=_("Cost one run may incur."),
    )
    run_timeout_seconds = models.PositiveIntegerField(
        _("run timeout seconds"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Wall-clock deadline of a run from its creation, including time queued or awaiting approval."),
    )
    daily_token_budget = models.PositiveBigIntegerField(
        _("daily token budget"),
        null=True,
        blank=True,
        help_text=_("Tokens this agent may use per day (in the agent's time zone)."),
    )
    daily_cost_budget = models.DecimalField(
        _("daily cost budget"),
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text=_("Cost this agent may incur per day."),
    )
    # Escalation (engine.approvals.approvals_escalate): a policy of the agent, not of a version,
    # so that changing who is told takes effect for the approvals already waiting.
    approval_escalate_after_minutes = models.PositiveIntegerField(
        _("escalate approvals after (minutes)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(ESCALATION_MAX_MINUTES)],
        help_text=_(
            "An approval still pending this many minutes after it was requested is escalated once: the "
            "webhooks marked as escalation channels (chat groups, email addresses) are told. Empty: no escalation."
        ),
    )
    is_active = models.BooleanField(_("is active"), default=True)
    # API access and conversation policy.
    allowed_groups = models.ManyToManyField(
        "auth.Group",
        blank=True,
        related_name="+",
        help_text=_("Who may use this agent through the API. Empty: every user."),
        verbose_name=_("allowed groups"),
    )
    concurrent_messages = models.CharField(
        _("concurrent messages"),
        max_length=16,
        choices=ConcurrentMessages.choices,
        default=ConcurrentMessages.REJECT,
        help_text=_("What a new message does while the conversation still has an active run."),
    )
    # Limits per end user (the application's own id for the person, Conversation.end_user): a
    # policy of the API like the one above, not of a version, so changing one takes effect at once.
    end_user_messages_per_minute = models.PositiveIntegerField(
        _("messages per minute per end user"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_(
            "Messages one end user may send this agent per minute; more are refused with 429. Empty: no limit."
        ),
    )
    end_user_tokens_per_day = models.PositiveBigIntegerField(
        _("tokens per day per end user"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_(
            "Tokens one end user's runs of this agent may use per day (in the agent's time zone); once reached, "
            "new messages are refused with 429 until the day ends. Empty: no limit."
        ),
    )
    # Where else the agent may be reached: opt-in, and not part of a version (like its widgets and
    # hooks): who may call it is decided by the caller's token as on every way in.
    mcp_exposed = models.BooleanField(
        _("reachable over MCP"),
        default=False,
        help_text=_("List the agent as a tool of the workspace's MCP server (docs/mcp-server.md)."),
    )
    a2a_exposed = models.BooleanField(
        _("reachable over A2A"),
        default=False,
        help_text=_("Publish the agent's card and answer A2A messages (docs/a2a.md)."),
    )
    # Answers in a schema (docs/quality.md): the final answer is validated on the platform's side;
    # an invalid one is sent back to the model with the errors, at most `output_repair_turns`
    # times, then the run ends (stop reason schema_invalid). Null: any text is an answer.
    output_schema = models.JSONField(
        _("output schema"),
        null=True,
        blank=True,
        help_text=_("A JSON Schema the final answer, parsed as JSON, must match. Leave empty for free text."),
    )
    output_repair_turns = models.PositiveSmallIntegerField(
        _("repair turns"),
        default=2,
        validators=[MaxValueValidator(5)],
        help_text=_("How many times an answer that does not match the output schema is sent back to be fixed."),
    )
    # Long-term memory (the memory app): part of the version, like the context policy.
    memory_enabled = models.BooleanField(
        _("long-term memory"),
        default=False,
        help_text=_(
            "Remember what each end user says across conversations: after a run completes, a model call "
            "extracts facts and preferences, and the next runs are shown the most relevant ones."
        ),
    )
    memory_space = models.SlugField(
        _("memory space"),
        max_length=100,
        blank=True,
        default="",
        help_text=_("Agents naming the same space share their end users' memories. Empty: this agent's own."),
    )
    memory_kinds = models.JSONField(
        _("memory kinds"),
        default=list,
        blank=True,
        help_text=_("The kinds of memory to keep (fact, preference, event, instruction). Empty: all."),
    )
    memory_shown = models.PositiveSmallIntegerField(
        _("memories shown"),
        default=5,
        validators=[MaxValueValidator(50)],
        help_text=_("How many of the most relevant memories a run is shown at its first step."),
    )
    memory_ttl_days = models.PositiveIntegerField(
        _("memory lifetime (days)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("A memory not used or confirmed for this many days is forgotten. Empty: kept until removed."),
    )
    memory_embedding_model = models.ForeignKey(
        ModelConfig,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("memory embedding model"),
        help_text=_(
            "An OpenAI-compatible /embeddings endpoint: memories are also found by meaning (vector search). "
            "Empty: keyword search only."
        ),
    )
    memory_daily_tokens = models.PositiveIntegerField(
        _("memory extraction tokens per day"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_(
            "Tokens this agent's memory extractions may use per day (in the agent's time zone). Once spent, "
            "completed runs are not extracted until the day ends, and the log says so. Empty: no limit."
        ),
    )
    # Retention: terminal runs older than this are purged (with all their audit rows) by the
    # daily sweep, which leaves a tombstone naming who set the policy; empty keeps them forever.
    retention_days = models.PositiveIntegerField(
        _("retention days"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_(
            "Delete this agent's finished runs (with their model calls, tool calls, approvals and events) "
            "this many days after they started. A tombstone records each purge. Empty: keep them forever."
        ),
    )
    retention_set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        verbose_name=_("retention set by"),
    )
    retention_set_at = models.DateTimeField(_("retention set at"), null=True, blank=True, editable=False)
    # Releases (agents.releases): what live traffic runs. Not editable here: only publish, roll
    # back and the canary actions move them, each leaving an AgentRelease row.
    published_version = models.ForeignKey(
        "AgentVersion",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        verbose_name=_("published version"),
        help_text=_("What new conversations run. Empty: never published, live traffic runs the draft."),
    )
    canary_version = models.ForeignKey(
        "AgentVersion",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        verbose_name=_("canary version"),
    )
    canary_percent = models.PositiveSmallIntegerField(
        _("canary percent"), default=0, editable=False, validators=[MinValueValidator(1), MaxValueValidator(99)]
    )
    guardrail_redact_stored = models.BooleanField(
        _("store redacted user messages"),
        default=False,
        help_text=_(
            "With a redacting guardrail on the input side: also store the user's message redacted. "
            "Otherwise only what the model is sent is redacted, and the stored message keeps the original."
        ),
    )
    # What becomes of a part (attachments.parts) of a kind the agent's model does not take
    # (ModelConfig.input_kinds): refused when posted, or turned into text before the step that
    # sends it (engine.part_conversion).
    audio_parts = models.CharField(
        _("audio the model does not take"), max_length=16, choices=AudioParts.choices, default=AudioParts.REFUSE
    )
    transcription_model_config = models.ForeignKey(
        ModelConfig,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("transcription model config"),
        help_text=_("A model config of purpose transcription: what transcribes audio."),
    )
    image_parts = models.CharField(
        _("images the model does not take"), max_length=16, choices=ImageParts.choices, default=ImageParts.REFUSE
    )
    description_model_config = models.ForeignKey(
        ModelConfig,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("description model config"),
        help_text=_("A chat model config that takes images: what describes an image."),
    )
    file_parts = models.CharField(
        _("files the model does not take"), max_length=16, choices=FileParts.choices, default=FileParts.REFUSE
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("agent")
        verbose_name_plural = _("agents")
        permissions = [
            ("publish_agent", _("Can publish, roll back and canary agent versions")),
            ("test_agent_version", _("Can run an agent's draft or an unpublished version")),
        ]
        constraints = [
            # A canary always has a share, and a share always has a candidate.
            models.CheckConstraint(
                condition=models.Q(canary_version__isnull=True, canary_percent=0)
                | models.Q(canary_version__isnull=False, canary_percent__gte=1, canary_percent__lte=99),
                name="agent_canary_share",
            ),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        references_check(self)
        if self.tool_choice == ToolChoice.TOOL and not self.tool_choice_name:
            raise ValidationError({"tool_choice_name": "Name the tool the model must call."})
        if self.tool_choice != ToolChoice.TOOL and self.tool_choice_name:
            raise ValidationError(
                {"tool_choice_name": "Only used when tool choice is 'the named tool'; leave it empty."}
            )
        kinds_problem = memory_kinds_problem(self.memory_kinds)
        if kinds_problem:
            raise ValidationError({"memory_kinds": kinds_problem})
        if self.output_schema is not None:
            try:
                output_schema_check(self.output_schema)
            except OutputSchemaInvalid as exc:
                raise ValidationError({"output_schema": str(exc)}) from None
        conversion_problems = self._conversion_problems()
        if conversion_problems:
            raise ValidationError(conversion_problems)
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

    def _conversion_problems(self) -> dict:
        """A conversion names the model config it needs, and that config can do it."""
        problems = {}
        transcriber = self.transcription_model_config if self.transcription_model_config_id else None
        if self.audio_parts == AudioParts.TRANSCRIBE and transcriber is None:
            problems["transcription_model_config"] = _("Name the model config that transcribes audio.")
        elif transcriber is not None and transcriber.purpose != ModelPurpose.TRANSCRIPTION:
            problems["transcription_model_config"] = _("Choose a model config of purpose transcription.")
        describer = self.description_model_config if self.description_model_config_id else None
        if self.image_parts == ImageParts.DESCRIBE and describer is None:
            problems["description_model_config"] = _("Name the model config that describes images.")
        elif describer is not None and (
            describer.purpose != ModelPurpose.CHAT or "image" not in (describer.input_kinds or [])
        ):
            problems["description_model_config"] = _("Choose a chat model config whose input kinds include image.")
        for field in ("model_config", "fallback_model_config"):
            config = getattr(self, field) if getattr(self, f"{field}_id") else None
            if config is not None and config.purpose != ModelPurpose.CHAT:
                problems[field] = _("An agent answers with a chat model config, not a transcription one.")
        return problems


class AgentTool(models.Model):
    """An agent's use of a tool; the approval policy can be overridden per agent."""

    class Approval(models.TextChoices):
        INHERIT = "inherit", _("as the tool says")
        NEVER = "never", _("never")
        ALWAYS = "always", _("always")
        RULE = "rule", _("when the rule matches")

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="agent_tools", verbose_name=_("agent"))
    tool = models.ForeignKey(
        "tools.ToolDefinition", on_delete=models.PROTECT, related_name="agent_tools", verbose_name=_("tool")
    )
    approval = models.CharField(_("approval"), max_length=16, choices=Approval.choices, default=Approval.INHERIT)
    approval_rule = models.CharField(
        _("approval rule"),
        max_length=500,
        blank=True,
        help_text=_("With 'when the rule matches', e.g. amount > 1000."),
    )
    # What the model is told the tool is for decides whether it calls it; an agent can word it
    # for its own task (or try a new wording on its draft) without changing the shared tool.
    description_override = models.TextField(
        _("description for this agent"),
        blank=True,
        help_text=_("Shown to the model instead of the tool's description, for this agent only; empty: the tool's."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)

    class Meta:
        verbose_name = _("agent tool")
        verbose_name_plural = _("agent tools")
        constraints = [models.UniqueConstraint(fields=["agent", "tool"], name="agent_tool_unique")]

    def __str__(self):
        return f"{self.agent} → {self.tool}"

    @property
    def model_description(self) -> str:
        """The description the agent's model is shown."""
        return self.description_override or self.tool.description

    def clean(self):
        references_check(self)
        if self.approval == self.Approval.RULE:
            try:
                validate_rule(self.approval_rule, self.tool.parameters if self.tool_id else None)
            except ValidationError as exc:
                raise ValidationError({"approval_rule": exc.messages}) from exc


class GuardrailRule(InWorkspace):
    """One check an agent makes on what the requester wrote (input: the user's messages, and a
    chat completion's own system, developer and assistant turns), on its model's final answer
    (output) or on both. The detectors are agents.guardrails; a run enforces the rules of the
    version it is pinned to (engine.guardrails)."""

    class Side(models.TextChoices):
        INPUT = guardrails.SIDE_INPUT, _("input (every message the requester wrote)")
        OUTPUT = guardrails.SIDE_OUTPUT, _("output (the model's final answer)")
        BOTH = guardrails.SIDE_BOTH, _("both")

    class Kind(models.TextChoices):
        BLOCKED_TERMS = guardrails.KIND_TERMS, _("blocked terms")
        BLOCKED_PATTERN = guardrails.KIND_PATTERN, _("blocked pattern")
        PII_PHONE = guardrails.KIND_PHONE, _("PII: phone numbers")
        PII_ID_CARD = guardrails.KIND_ID_CARD, _("PII: Chinese resident ID numbers")
        PII_EMAIL = guardrails.KIND_EMAIL, _("PII: email addresses")
        PII_BANK_CARD = guardrails.KIND_BANK_CARD, _("PII: bank card numbers")
        MODERATION = guardrails.KIND_MODERATION, _("moderation by a model")

    class Action(models.TextChoices):
        BLOCK = guardrails.ACTION_BLOCK, _("block")
        REDACT = guardrails.ACTION_REDACT, _("redact")
        FLAG = guardrails.ACTION_FLAG, _("flag for review")

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="guardrail_rules", verbose_name=_("agent"))
    side = models.CharField(_("side"), max_length=8, choices=Side.choices, default=Side.BOTH)
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices)
    action = models.CharField(_("action"), max_length=8, choices=Action.choices, default=Action.BLOCK)
    terms = models.TextField(
        _("terms"),
        blank=True,
        help_text=_("Blocked terms: one per line, matched anywhere in the text, ignoring case."),
    )
    pattern = models.CharField(
        _("pattern"),
        max_length=guardrails.PATTERN_MAX_LENGTH,
        blank=True,
        help_text=_(
            "Blocked pattern: a regular expression in RE2 syntax, which runs in time linear in the text: "
            "no backreferences, lookahead or lookbehind, atomic groups or possessive quantifiers."
        ),
    )
    model_config = models.ForeignKey(
        ModelConfig,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("moderation model"),
        help_text=_("Moderation: the model that judges the text. Its calls count toward the run's tokens and cost."),
    )
    rubric = models.TextField(
        _("rubric"),
        blank=True,
        help_text=_("Moderation: what the model must not let through, in plain words."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)

    class Meta:
        verbose_name = _("guardrail rule")
        verbose_name_plural = _("guardrail rules")
        ordering = ["agent", "id"]

    def __str__(self):
        return f"{self.get_kind_display()} ({self.get_side_display()}, {self.get_action_display()})"

    def clean(self):
        references_check(self)
        if self.kind == self.Kind.BLOCKED_TERMS:
            terms = guardrails.terms_parse(self.terms)
            if not terms:
                raise ValidationError({"terms": _("List at least one term.")})
            if len(terms) > guardrails.TERM_MAX_COUNT:
                raise ValidationError({"terms": _("At most %(count)d terms.") % {"count": guardrails.TERM_MAX_COUNT}})
            if any(len(term) > guardrails.TERM_MAX_LENGTH for term in terms):
                raise ValidationError(
                    {"terms": _("A term has at most %(count)d characters.") % {"count": guardrails.TERM_MAX_LENGTH}}
                )
        elif self.terms.strip():
            raise ValidationError({"terms": _("Only used by the kind 'blocked terms'; leave it empty.")})
        if self.kind == self.Kind.BLOCKED_PATTERN:
            if not self.pattern:
                raise ValidationError({"pattern": _("Give the pattern.")})
            try:
                guardrails.pattern_check(self.pattern)
            except guardrails.PatternInvalid as exc:
                raise ValidationError({"pattern": _("This pattern cannot be used: %(why)s.") % {"why": exc}}) from exc
        elif self.pattern:
            raise ValidationError({"pattern": _("Only used by the kind 'blocked pattern'; leave it empty.")})
        if self.kind == self.Kind.MODERATION:
            if not self.model_config_id:
                raise ValidationError({"model_config": _("Choose the model that moderates.")})
            if not self.rubric.strip():
                raise ValidationError({"rubric": _("Say what the model must not let through.")})
            if self.action == self.Action.REDACT:
                # A verdict is about the whole text: there is no match to replace.
                raise ValidationError({"action": _("Moderation can block or flag, not redact.")})
        elif self.model_config_id or self.rubric.strip():
            raise ValidationError({"rubric": _("The model and the rubric are only used by the kind 'moderation'.")})


class AgentDelegate(models.Model):
    """Another agent this agent may call as a tool (agents as tools). A call starts a run of the
    child agent in a conversation of its own; the child's answer is the call's result."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "parent__workspace"
    parent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="delegates", verbose_name=_("agent"))
    child = models.ForeignKey(
        Agent, on_delete=models.PROTECT, related_name="delegated_by", verbose_name=_("delegated agent")
    )
    tool_name = models.CharField(
        _("tool name"),
        max_length=64,
        validators=[tool_name_validator],
        help_text=_("The name the model calls, e.g. ask_researcher."),
    )
    description = models.TextField(
        _("description"),
        help_text=_("When the model should hand a task to this agent, and what it answers with."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)

    class Meta:
        verbose_name = _("delegated agent")
        verbose_name_plural = _("delegated agents (agents as tools)")
        constraints = [
            models.UniqueConstraint(fields=["parent", "tool_name"], name="agent_delegate_name_unique"),
            models.CheckConstraint(condition=~models.Q(parent=models.F("child")), name="agent_delegate_not_self"),
        ]

    def __str__(self):
        return f"{self.parent} → {self.child} ({self.tool_name})"

    def clean(self):
        references_check(self)
        if not (self.parent_id and self.child_id):
            return
        if self.tool_name and AgentTool.objects.filter(agent_id=self.parent_id, tool__name=self.tool_name).exists():
            raise ValidationError({"tool_name": _("The agent already has a tool with this name.")})
        if not self.enabled:
            return
        if self.parent_id == self.child_id:
            raise ValidationError({"child": _("An agent cannot delegate to itself.")})
        problem = chain_problem(
            edges=delegation_edges(exclude=self.pk),
            parent=self.parent_id,
            child=self.child_id,
            max_depth=settings.AGENTRY_DELEGATION_MAX_DEPTH,
        )
        if problem:
            raise ValidationError({"child": problem})


def delegation_edges(*, exclude=None) -> dict[int, set[int]]:
    """Every enabled delegation, agent → the agents it delegates to (`exclude`: a delegate's id)."""
    edges: dict[int, set[int]] = {}
    rows = AgentDelegate.objects.filter(enabled=True).exclude(pk=exclude).values_list("parent_id", "child_id")
    for parent, child in rows:
        edges.setdefault(parent, set()).add(child)
    return edges


class RoutingRule(models.Model):
    """One of an agent's routing rules: when its condition holds for a run's user message, the
    run's steps use its model config instead of the agent's (engine.routing). The rules are
    tried in order (`position`, then id), once per run; the first that matches wins, none: the
    agent's model. The agent's fallback model stays the fallback whichever model a rule picked."""

    class Condition(models.TextChoices):
        INPUT_LENGTH = "input_length", _("input length")
        ATTACHMENTS = "attachments", _("attachments")
        TIER = "tier", _("end user tier")
        TIME_OF_DAY = "time_of_day", _("time of day")
        CLASSIFIER = "classifier", _("classifier")

    class LengthUnit(models.TextChoices):
        CHARS = "chars", _("characters")
        TOKENS = "tokens", _("tokens (estimated)")

    class AttachmentKind(models.TextChoices):
        ANY = "any", _("any attachment")
        IMAGE = "image", _("an image")
        AUDIO = "audio", _("audio")
        FILE = "file", _("a file")

    # Its workspace is its agent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="routing_rules", verbose_name=_("agent"))
    position = models.PositiveSmallIntegerField(_("position"), default=0, help_text=_("Lower is tried first."))
    name = models.CharField(_("name"), max_length=100, blank=True, help_text=_("Shown where the decision is recorded."))
    condition = models.CharField(_("condition"), max_length=16, choices=Condition.choices)
    length_unit = models.CharField(
        _("length unit"), max_length=8, choices=LengthUnit.choices, default=LengthUnit.CHARS, blank=True
    )
    length_over = models.PositiveIntegerField(
        _("longer than"), null=True, blank=True, help_text=_("Input length: matches a message longer than this.")
    )
    length_under = models.PositiveIntegerField(
        _("shorter than"), null=True, blank=True, help_text=_("Input length: matches a message shorter than this.")
    )
    attachment_kind = models.CharField(
        _("attachment kind"), max_length=8, choices=AttachmentKind.choices, blank=True, default=""
    )
    tiers = models.CharField(
        _("tiers"),
        max_length=200,
        blank=True,
        help_text=_(
            "End user tier: the values that match, comma-separated, compared with the 'tier' of the message's "
            "metadata, else of the conversation's metadata (both set by the application through the API)."
        ),
    )
    time_start = models.TimeField(_("from"), null=True, blank=True)
    time_end = models.TimeField(
        _("until"), null=True, blank=True, help_text=_("Time of day: a window that may span midnight (22:00 to 06:00).")
    )
    time_zone = models.CharField(
        _("time zone"),
        max_length=64,
        blank=True,
        validators=[validate_time_zone],
        help_text=_("Time of day: empty for the agent's time zone."),
    )
    classifier_model = models.ForeignKey(
        ModelConfig,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        limit_choices_to={"purpose": ModelPurpose.CHAT},
        related_name="+",
        verbose_name=_("classifier model"),
        help_text=_("Classifier: the model that labels the message. Its call counts toward the run's tokens and cost."),
    )
    classifier_prompt = models.TextField(
        _("classifier prompt"),
        blank=True,
        help_text=_("Classifier: how to label the message, naming the labels; the model answers with one label."),
    )
    labels = models.CharField(
        _("labels"),
        max_length=200,
        blank=True,
        help_text=_("Classifier: the labels that match, comma-separated (compared ignoring case)."),
    )
    model_config = models.ForeignKey(
        ModelConfig,
        on_delete=models.PROTECT,
        limit_choices_to={"purpose": ModelPurpose.CHAT},
        related_name="+",
        verbose_name=_("model config"),
        help_text=_("The model the run's steps use when the rule matches."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)

    class Meta:
        verbose_name = _("routing rule")
        verbose_name_plural = _("routing rules")
        ordering = ["agent", "position", "id"]

    def __str__(self):
        return self.name or f"{self.get_condition_display()} → {self.model_config_id}"

    def clean(self):
        references_check(self)
        problems = {}
        for field in ("model_config", "classifier_model"):
            config = getattr(self, field) if getattr(self, f"{field}_id") else None
            if config is not None and config.purpose != ModelPurpose.CHAT:
                problems[field] = _("Choose a chat model config.")
        condition = self.condition
        if condition == self.Condition.INPUT_LENGTH and self.length_over is None and self.length_under is None:
            problems["length_over"] = _("Give a length the message must be longer or shorter than.")
        if condition == self.Condition.ATTACHMENTS and not self.attachment_kind:
            problems["attachment_kind"] = _("Choose the kind of attachment.")
        if condition == self.Condition.TIER and not routing_values(self.tiers):
            problems["tiers"] = _("List at least one tier.")
        if condition == self.Condition.TIME_OF_DAY and (self.time_start is None or self.time_end is None):
            problems["time_start"] = _("Give the window's start and end.")
        if condition == self.Condition.CLASSIFIER:
            if not self.classifier_model_id:
                problems["classifier_model"] = _("Choose the model that classifies the message.")
            if not self.classifier_prompt.strip():
                problems["classifier_prompt"] = _("Say how to label the message.")
            if not routing_values(self.labels):
                problems["labels"] = _("List at least one label.")
        if problems:
            raise ValidationError(problems)


def routing_values(text: str) -> list[str]:
    """A rule's comma-separated tiers or labels, trimmed and lower-cased, empty ones left out."""
    return [value.strip().lower() for value in text.split(",") if value.strip()]


class AgentVersion(models.Model):
    """Immutable snapshot of everything a run needs to know about its agent.

    Runs point here, so editing an agent, its model or its tools never changes what an old
    run ran with. A new version is written only when the snapshot's hash changes.
    """

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions", verbose_name=_("agent"))
    number = models.PositiveIntegerField(_("number"))
    config_hash = models.CharField(_("config hash"), max_length=64)
    snapshot = models.JSONField(_("snapshot"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    # Set once, when the version is first published (or first goes out as a canary); every later
    # release action on it is an AgentRelease row.
    published_at = models.DateTimeField(_("published at"), null=True, blank=True)
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("published by"),
    )
    note = models.TextField(_("note"), blank=True, default="")
    # A version the prompt playground wrote for an edited draft that was never saved
    # (console.playground): its runs must point at exactly what they ran, so it is a version,
    # but it is nobody's configuration. It has no number of its own (0: numbers count the
    # agent's real versions, with no gaps for try-outs), is never the agent's draft or latest
    # version, is left out of the versions lists and choices, and no release action takes it
    # (agents.releases). A flag, not another model: the engine, timelines and evals read a run's
    # version the same way whatever wrote it.
    playground = models.BooleanField(_("playground"), default=False, editable=False)

    class Meta:
        verbose_name = _("agent version")
        verbose_name_plural = _("agent versions")
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "number"],
                condition=models.Q(playground=False),
                name="agent_version_number_unique",
            ),
            # Playground versions are deduplicated by their configuration's hash.
            models.UniqueConstraint(
                fields=["agent", "config_hash"],
                condition=models.Q(playground=True),
                name="agent_version_playground_hash_unique",
            ),
        ]
        indexes = [models.Index(fields=["agent", "config_hash"])]

    def __str__(self):
        if self.playground:
            return f"{self.agent} playground {self.config_hash[:8]}"
        return f"{self.agent} v{self.number}"


# How many rows share an agent's usage of one day. Every completed model call adds to one of them
# in the statement that records it, under that row's lock until it commits: with one row, every
# run of an agent queued for it (at 200 runs in flight the statement took 7.8 ms on average,
# 0.4 ms without the row). A run always adds to the same shard, so its own calls never wait on
# each other; a budget check sums the day's rows.
USAGE_SHARDS = 16


class AgentUsageDay(models.Model):
    """Part of the tokens and cost an agent used on one day (its time zone), for daily budgets and
    reports: the day's usage is the sum of its rows, one per shard (USAGE_SHARDS).

    Bumped by an upsert in the same transaction as each completed model call, so the day's rows
    always add up to that day's LLMCall rows and a budget check is one indexed read.
    """

    # Indexed by agent_usage_day_unique (agent, day, shard), which leads with it.
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    agent = models.ForeignKey(
        Agent, on_delete=models.CASCADE, related_name="usage_days", verbose_name=_("agent"), db_index=False
    )
    day = models.DateField(_("day"))
    shard = models.PositiveSmallIntegerField(
        _("shard"), default=0, help_text=_("The row of the day this part of the usage was added to.")
    )
    total_tokens = models.PositiveBigIntegerField(_("total tokens"), default=0)
    cost = models.DecimalField(_("cost"), max_digits=16, decimal_places=8, default=0)
    calls = models.PositiveIntegerField(_("calls"), default=0)

    class Meta:
        verbose_name = _("daily agent usage")
        verbose_name_plural = _("daily agent usage")
        constraints = [models.UniqueConstraint(fields=["agent", "day", "shard"], name="agent_usage_day_unique")]

    def __str__(self):
        return f"{self.agent_id} {self.day} #{self.shard}"


class ReleaseAction(models.TextChoices):
    PUBLISH = "publish", _("publish")
    ROLLBACK = "rollback", _("roll back")
    CANARY_START = "canary_start", _("canary start")
    CANARY_PROMOTE = "canary_promote", _("canary promote")
    CANARY_ABORT = "canary_abort", _("canary abort")


class AgentRelease(models.Model):
    """One release action on an agent: the audit trail of what live traffic ran, and who decided."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="releases", verbose_name=_("agent"))
    action = models.CharField(_("action"), max_length=20, choices=ReleaseAction.choices)
    version = models.ForeignKey(
        AgentVersion, on_delete=models.PROTECT, related_name="releases", verbose_name=_("version")
    )
    previous_version = models.ForeignKey(
        AgentVersion,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("previous version"),
    )
    canary_percent = models.PositiveSmallIntegerField(_("canary percent"), null=True, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("user"),
    )
    note = models.TextField(_("note"), blank=True, default="")
    at = models.DateTimeField(_("at"), auto_now_add=True)

    class Meta:
        verbose_name = _("agent release")
        verbose_name_plural = _("agent releases")
        indexes = [models.Index(fields=["agent", "-at"], name="agent_release_agent_at")]

    def __str__(self):
        return f"{self.agent} {self.action} v{self.version.number}"
