"""An agent's bot in a chat app (Slack, Telegram, Feishu/Lark, DingTalk, WeCom): the channel the
service calls back, the chat users it knows, and every callback it accepted.

A callback's event id is unique per channel (ChatEvent): the services retry a callback they think
was not answered in time, and a retry must not start a second run. A thread of the chat (a group
thread, a direct chat) is one conversation (ChatThread)."""

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from platform_site.crypto import EncryptedTextField
from workspaces.defaults import InWorkspace
from workspaces.references import references_check


class ChatServiceName(models.TextChoices):
    SLACK = "slack", "Slack"
    TELEGRAM = "telegram", "Telegram"
    FEISHU = "feishu", _("Feishu / Lark")
    DINGTALK = "dingtalk", _("DingTalk")
    WECOM = "wecom", _("WeCom")


class ChatChannel(InWorkspace):
    # The public id: the callback URL the service is given names the channel by it.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="chat_channels", verbose_name=_("agent")
    )
    name = models.CharField(_("name"), max_length=200)
    service = models.CharField(_("chat service"), max_length=20, choices=ChatServiceName.choices)
    enabled = models.BooleanField(_("enabled"), default=True)
    # The service's credentials by name (a JSON object), as the service module's secret_names lists them.
    secrets = EncryptedTextField(_("secrets"), default="{}")
    api_base = models.URLField(
        _("API base URL"),
        blank=True,
        default="",
        help_text=_("The service's API host, when not its public one (a proxy, a private deployment)."),
    )
    auto_map_users = models.BooleanField(
        _("answer every chat user"),
        default=False,
        help_text=_(
            "Off: only the chat users listed for this channel are answered; anyone else is ignored. "
            "On: an unknown chat user becomes an end user named after the service and their chat id."
        ),
    )
    # Who the conversations belong to (what the API shows them to).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        blank=True,
        related_name="+",
        verbose_name=_("owner"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("chat channel")
        verbose_name_plural = _("chat channels")
        ordering = ["agent", "name"]

    def __str__(self):
        return self.name

    def clean(self):
        references_check(self)


class ChatUser(models.Model):
    """A chat user the channel answers: the end user they are, and, for an approver, the
    platform account whose role decides the approvals they press buttons on."""

    workspace_path = "channel__workspace"
    channel = models.ForeignKey(ChatChannel, on_delete=models.CASCADE, related_name="users", verbose_name=_("channel"))
    chat_user_id = models.CharField(_("chat user id"), max_length=200)
    end_user = models.CharField(_("end user"), max_length=200)
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("platform account"),
        help_text=_("Set only for an approver: their approval buttons decide as this account."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("chat user")
        verbose_name_plural = _("chat users")
        ordering = ["channel", "chat_user_id"]
        constraints = [models.UniqueConstraint(fields=["channel", "chat_user_id"], name="chat_user_once")]

    def __str__(self):
        return f"{self.chat_user_id} → {self.end_user}"


class ChatThread(models.Model):
    """A thread of the chat and the conversation it is."""

    workspace_path = "channel__workspace"
    channel = models.ForeignKey(ChatChannel, on_delete=models.CASCADE, related_name="+", verbose_name=_("channel"))
    thread_id = models.CharField(_("thread id"), max_length=200)
    conversation = models.OneToOneField(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="+", verbose_name=_("conversation")
    )

    class Meta:
        verbose_name = _("chat thread")
        verbose_name_plural = _("chat threads")
        constraints = [models.UniqueConstraint(fields=["channel", "thread_id"], name="chat_thread_once")]


class ChatEvent(models.Model):
    """One callback the channel accepted, under the service's event id, and what came of it."""

    class Outcome(models.TextChoices):
        STARTED = "started", _("Started a run")
        DECIDED = "decided", _("Decided an approval")
        REFUSED = "refused", _("Refused (see detail)")
        UNKNOWN_USER = "unknown_user", _("Ignored: unknown chat user")

    workspace_path = "channel__workspace"
    channel = models.ForeignKey(ChatChannel, on_delete=models.CASCADE, related_name="events", verbose_name=_("channel"))
    event_id = models.CharField(_("event id"), max_length=200)
    chat_user_id = models.CharField(_("chat user id"), max_length=200, blank=True, default="")
    thread_id = models.CharField(_("thread id"), max_length=200, blank=True, default="")
    # What the service module needs to answer in the thread (chatbots.services.base.ChatMessage.reply_to).
    reply_to = models.JSONField(_("reply to"), default=dict, blank=True)
    outcome = models.CharField(_("outcome"), max_length=20, choices=Outcome.choices)
    detail = models.TextField(_("detail"), blank=True, default="")
    run = models.OneToOneField(
        "conversations.Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="chat_event",
        verbose_name=_("run"),
    )
    replied_at = models.DateTimeField(_("answer posted"), null=True, blank=True)
    # The message the streamed answer was first posted as (the service module's
    # posted_from_answer: what its update_request edits), and the digest of the text it shows.
    posted = models.JSONField(_("posted message"), default=dict, blank=True)
    reply_error = models.TextField(_("last posting error"), blank=True, default="")
    received_at = models.DateTimeField(_("received at"), auto_now_add=True)

    class Meta:
        verbose_name = _("chat event")
        verbose_name_plural = _("chat events")
        ordering = ["-received_at"]
        constraints = [models.UniqueConstraint(fields=["channel", "event_id"], name="chat_event_once")]
