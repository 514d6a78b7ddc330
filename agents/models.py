import zoneinfo

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from platform_site.crypto import EncryptedTextField


class ProviderKind(models.TextChoices):
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible"


class ModelConfig(models.Model):
    """How to reach one model: endpoint, credentials, sampling parameters and prices."""

    name = models.CharField(max_length=100, unique=True)
    provider = models.CharField(
        max_length=32, choices=ProviderKind.choices, default=ProviderKind.OPENAI_COMPATIBLE
    )
    base_url = models.URLField(max_length=500, help_text="e.g. https://api.openai.com/v1")
    api_key = EncryptedTextField(blank=True, default="")
    model = models.CharField(max_length=200, help_text="Model name sent to the provider.")
    temperature = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(2)]
    )
    top_p = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(1)]
    )
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    frequency_penalty = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(-2), MaxValueValidator(2)]
    )
    presence_penalty = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(-2), MaxValueValidator(2)]
    )
    stream = models.BooleanField(default=False)
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
    price_cached_input_per_million = models.DecimalField(
        max_digits=12, decimal_places=6, default=0
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"{self.name} ({self.model})"


class ToolChoice(models.TextChoices):
    AUTO = "auto", "auto"
    NONE = "none", "none"
    REQUIRED = "required", "required"


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
        default=8, validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Model calls per run before the run stops with an explanation.",
    )
    max_same_tool_streak = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1)],
        help_text="Consecutive steps calling the same tool before the call is refused.",
    )
    tool_choice = models.CharField(max_length=16, choices=ToolChoice.choices, default=ToolChoice.AUTO)
    parallel_tool_calls = models.BooleanField(default=True)
    is_active = models.BooleanField(default=True)
    # API access and conversation policy.
    allowed_groups = models.ManyToManyField(
        "auth.Group", blank=True, related_name="+",
        help_text="Who may use this agent through the API. Empty: every user.",
    )
    concurrent_messages = models.CharField(
        max_length=16, choices=ConcurrentMessages.choices, default=ConcurrentMessages.REJECT,
        help_text="What a new message does while the conversation still has an active run.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return self.name


class AgentTool(models.Model):
    """An agent's use of a tool; the approval policy can be overridden per agent."""

    class Approval(models.TextChoices):
        INHERIT = "inherit", "as the tool says"
        NEVER = "never", "never"
        ALWAYS = "always", "always"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="agent_tools")
    tool = models.ForeignKey("tools.ToolDefinition", on_delete=models.PROTECT, related_name="agent_tools")
    approval = models.CharField(max_length=16, choices=Approval.choices, default=Approval.INHERIT)
    enabled = models.BooleanField(default=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "tool"], name="agent_tool_unique")]

    def __str__(self):
        return f"{self.agent} → {self.tool}"


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
