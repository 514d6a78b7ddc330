"""Long-term memory: short statements about one end user, kept per agent or shared memory space.

A memory is written by the extraction that follows a completed run (engine.memory), by the
agent's `remember` tool, or corrected by an operator; every change is a MemoryChange row saying
who or what made it and from which run. A run's model call records the memories it was shown
(MemoryUse), so an answer can be traced to the memory behind it. Forgetting an end user deletes
all three kinds of row (memory.forget)."""

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from workspaces.defaults import InWorkspace


class MemoryKind(models.TextChoices):
    FACT = "fact", _("Fact")
    PREFERENCE = "preference", _("Preference")
    EVENT = "event", _("Event")
    INSTRUCTION = "instruction", _("Instruction")


class Memory(InWorkspace):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Whose memories these are: an agent's own ("agent:<id>") or a shared space's name
    # (Agent.memory_space), and the end user they are about.
    # The application (API token owner) whose end user this is: end user ids are the
    # application's own, so two applications' "u1" are two people.
    scope = models.CharField(max_length=120, verbose_name=_("scope"))
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, related_name="+", verbose_name=_("owner")
    )
    end_user = models.CharField(max_length=200, verbose_name=_("end user"))
    # The channel that vouched for the end user (memory.channels): an end user id is only as wide
    # as the secret that signs it, so "u1" of one widget is not "u1" of another widget, a hook or
    # the owner's API. Empty: the owner's own channel (the API, and the widgets and hooks that
    # share their end users' memory with it).
    channel = models.CharField(max_length=80, blank=True, default="", verbose_name=_("channel"))
    kind = models.CharField(max_length=16, choices=MemoryKind.choices, verbose_name=_("kind"))
    statement = models.TextField(max_length=500, verbose_name=_("statement"))
    # Search data: knowledge.keyword's term counts, computed when the statement is written, and
    # {"model": ..., "vector": [...]} from the agent's memory embedding model, if it names one
    # (memory.services: written with the statement or filled in by a later search).
    terms = models.JSONField(default=dict, blank=True, verbose_name=_("terms"))
    embedding = models.JSONField(null=True, blank=True, verbose_name=_("embedding"))
    source_run = models.ForeignKey(
        "conversations.Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("source run"),
    )
    source_message = models.ForeignKey(
        "conversations.Message",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("source message"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("written at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))
    last_used_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last used at"))
    expires_at = models.DateTimeField(null=True, blank=True, verbose_name=_("expires at"))

    class Meta:
        verbose_name = _("memory")
        verbose_name_plural = _("memories")
        ordering = ["-updated_at"]
        indexes = [
            models.Index(
                fields=["scope", "owner", "channel", "end_user", "-updated_at"], name="memory_scope_channel_user_idx"
            )
        ]

    def __str__(self):
        return self.statement[:80]


class MemoryChange(InWorkspace):
    """One change to a memory, and who made it: the audit trail an operator reads."""

    class Action(models.TextChoices):
        ADD = "add", _("Added")
        UPDATE = "update", _("Updated")
        DELETE = "delete", _("Deleted")
        EXPIRE = "expire", _("Expired")

    class Source(models.TextChoices):
        EXTRACTION = "extraction", _("Extraction after a run")
        TOOL = "tool", _("The agent's remember tool")
        OPERATOR = "operator", _("An operator")
        API = "api", _("The API")
        # The agent's memory lifetime ended (memory.services.memories_expire): no person acted.
        LIFETIME = "lifetime", _("The memory's lifetime")

    # Kept when the memory is deleted (the change says what it held), removed with the end user.
    memory = models.ForeignKey(
        Memory, on_delete=models.SET_NULL, null=True, blank=True, related_name="changes", verbose_name=_("memory")
    )
    scope = models.CharField(max_length=120, verbose_name=_("scope"))
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, related_name="+", verbose_name=_("owner")
    )
    end_user = models.CharField(max_length=200, verbose_name=_("end user"))
    channel = models.CharField(max_length=80, blank=True, default="", verbose_name=_("channel"))
    action = models.CharField(max_length=8, choices=Action.choices, verbose_name=_("action"))
    source = models.CharField(max_length=12, choices=Source.choices, verbose_name=_("source"))
    before = models.TextField(blank=True, default="", verbose_name=_("before"))
    after = models.TextField(blank=True, default="", verbose_name=_("after"))
    run = models.ForeignKey(
        "conversations.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("run")
    )
    llm_call = models.ForeignKey(
        "conversations.LLMCall",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("model call"),
    )
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("changed by"),
    )
    reason = models.CharField(max_length=500, blank=True, default="", verbose_name=_("reason"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("changed at"))

    class Meta:
        verbose_name = _("memory change")
        verbose_name_plural = _("memory changes")
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "end_user", "-created_at"], name="memory_change_end_user_idx")]

    def __str__(self):
        return f"{self.get_action_display()}: {self.after or self.before}"[:80]


class MemoryUse(models.Model):
    """A memory a model call was shown (placed after the system prompt at a run's first step)."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    llm_call = models.ForeignKey(
        "conversations.LLMCall", on_delete=models.CASCADE, related_name="+", verbose_name=_("model call")
    )
    run = models.ForeignKey("conversations.Run", on_delete=models.CASCADE, related_name="+", verbose_name=_("run"))
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="uses", verbose_name=_("memory"))
    rank = models.PositiveSmallIntegerField(verbose_name=_("rank"))

    class Meta:
        verbose_name = _("memory use")
        verbose_name_plural = _("memory uses")
        ordering = ["llm_call", "rank"]
        constraints = [models.UniqueConstraint(fields=["llm_call", "memory"], name="memory_use_unique")]
