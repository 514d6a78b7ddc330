from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from tools.approval_policy import ApprovalExpiry, ApprovalPolicy, validate_rule

# Providers accept ^[a-zA-Z0-9_-]{1,64}$ for function names (OpenAI's rule, the strictest).
tool_name_validator = RegexValidator(
    r"^[A-Za-z0-9_-]{1,64}$", "Use 1–64 letters, digits, '_' or '-' (the providers' rule)."
)


def validate_parameters_schema(value) -> None:
    if not isinstance(value, dict):
        raise ValidationError("Parameters must be a JSON Schema object.")
    if value.get("type", "object") != "object":
        raise ValidationError('A tool\'s parameters schema must have "type": "object".')
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.path) or "(root)"
        raise ValidationError(f"Not a valid JSON Schema at {path}: {exc.message}") from exc


class ToolDefinition(models.Model):
    class Kind(models.TextChoices):
        PYTHON = "python", "Python (registered callable)"

    class SideEffect(models.TextChoices):
        READ = "read", "read"
        WRITE = "write", "write"

    name = models.CharField(max_length=64, unique=True, validators=[tool_name_validator])
    description = models.TextField(help_text="When the model should use it, and what it returns.")
    parameters = models.JSONField(
        default=dict, validators=[validate_parameters_schema], help_text="JSON Schema of the arguments."
    )
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.PYTHON)
    python_callable = models.CharField(
        max_length=200, blank=True, help_text="Registry name of the python tool; defaults to the tool name."
    )
    side_effect = models.CharField(max_length=8, choices=SideEffect.choices, default=SideEffect.READ)
    idempotent = models.BooleanField(
        default=False, help_text="Safe to run again after a crash left its outcome unknown."
    )
    approval_policy = models.CharField(
        max_length=16, choices=ApprovalPolicy.choices, default=ApprovalPolicy.AUTO,
        help_text="When a call waits for a person's approval. Agents can override it per tool.",
    )
    approval_rule = models.CharField(
        max_length=500, blank=True,
        help_text='With "when the rule matches": an expression on the arguments, e.g. amount > 1000 '
                  'or currency != "CNY". Arguments are names; args is the whole object.',
    )
    approval_timeout_seconds = models.PositiveIntegerField(
        null=True, blank=True, default=86400, validators=[MinValueValidator(1)],
        help_text="A pending approval expires after this long; empty: it waits until decided or cancelled.",
    )
    approval_on_expiry = models.CharField(
        max_length=16, choices=ApprovalExpiry.choices, default=ApprovalExpiry.CONTINUE,
        help_text="What an expired approval does to its run.",
    )
    timeout_seconds = models.FloatField(default=30, validators=[MinValueValidator(0.1)])
    max_result_chars = models.PositiveIntegerField(default=8000, validators=[MinValueValidator(100)])
    allowed_roles = models.JSONField(
        default=list, blank=True, help_text="Roles allowed to use the tool; empty means everyone."
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return self.name

    def clean(self):
        if self.approval_policy == ApprovalPolicy.RULE:
            try:
                validate_rule(self.approval_rule, self.parameters)
            except ValidationError as exc:
                raise ValidationError({"approval_rule": exc.messages}) from exc
        if self.kind == self.Kind.PYTHON:
            from tools.registry import registry

            target = self.python_callable or self.name
            if registry.get(target) is None:
                raise ValidationError(
                    {"python_callable": f"No python tool {target!r} is registered. Known: {', '.join(registry.names()) or 'none'}."}
                )
