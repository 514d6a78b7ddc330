"""Hourly rollups of the ledger, so the dashboard reads a few hundred rows instead of scanning
millions of model calls on every refresh. They are derived data: `rollups_refresh` rebuilds the
recent hours from the ledger, and any hour can be rebuilt again at any time."""

from django.db import models


class LLMCallHourly(models.Model):
    """Finished model-call attempts of one hour, per model config and agent."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    hour = models.DateTimeField()
    model_config = models.ForeignKey("agents.ModelConfig", on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    calls = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    reasoning_tokens = models.PositiveBigIntegerField(default=0)
    total_tokens = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    # Latency of the successful attempts as {bucket: count}; see monitoring/histogram.py.
    latency_histogram = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["hour", "model_config", "agent"], name="llm_call_hourly_unique"),
        ]


class RunHourly(models.Model):
    """Runs that ended in one hour, per agent, final status and stop reason."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    hour = models.DateTimeField()
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=20)
    stop_reason = models.CharField(max_length=20, blank=True, default="")
    runs = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["hour", "agent", "status", "stop_reason"], name="run_hourly_unique"),
        ]


class ErrorHourly(models.Model):
    """How often each error was seen in one hour, per agent: failed runs' errors and failed model
    attempts'."""

    class Source(models.TextChoices):
        RUN = "run"
        LLM_CALL = "llm_call"

    # Its workspace is its agent's (workspaces.access.in_workspace).
    workspace_path = "agent__workspace"
    hour = models.DateTimeField()
    # Empty only on rows rolled up before errors were counted per agent (a superuser's only).
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+", null=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    message = models.CharField(max_length=300)
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["hour", "agent", "source", "message"], name="error_hourly_agent_unique"),
        ]


class RollupState(models.Model):
    """One row: when the rollups were last rebuilt, so the dashboard can say how fresh they are."""

    name = models.CharField(max_length=32, primary_key=True)
    refreshed_at = models.DateTimeField()
    window_start = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(default=0)
