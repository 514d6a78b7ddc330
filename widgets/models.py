"""An agent's embeddable chat: a script tag on another site's page (widgets/static/widgets/widget.js)
or the hosted page /chat/<id>/. The end user is named by a token the site's backend signs with the
widget's secret (widgets.tokens); the conversations belong to the widget's owner."""

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from platform_site.crypto import EncryptedTextField
from widgets.origins import origins_validate
from workspaces.defaults import InWorkspace
from workspaces.references import references_check


class WidgetLanguage(models.TextChoices):
    CHINESE = "zh-hans", "简体中文"
    ENGLISH = "en", "English"


class Widget(InWorkspace):
    # The public id: the page's script tag names the widget by it (data-widget).
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="widgets", verbose_name=_("agent"))
    name = models.CharField(_("name"), max_length=200)
    enabled = models.BooleanField(_("enabled"), default=True)
    secret = EncryptedTextField(_("secret"))
    allowed_origins = models.TextField(
        _("allowed origins"),
        blank=True,
        default="",
        validators=[origins_validate],
        help_text=_("The sites that may embed the chat, one a line, as <code>scheme://host[:port]</code>."),
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        # Blank in forms: the admin makes the creator the owner unless a superuser chooses one.
        blank=True,
        related_name="+",
        verbose_name=_("owner"),
    )
    title = models.CharField(_("title"), max_length=100, blank=True, default="")
    greeting = models.TextField(_("greeting"), max_length=1000, blank=True, default="")
    language = models.CharField(
        _("language"), max_length=10, choices=WidgetLanguage.choices, default=WidgetLanguage.CHINESE
    )
    # An end user id is only the widget secret's word, so their memories are the widget's own
    # (memory.channels) unless the operator joins them to the owner's other channels.
    memory_shared = models.BooleanField(
        _("shares end users' memory with the owner's other channels"),
        default=False,
        help_text=_(
            "Off: what the agent remembers of an end user here is kept for this widget only. On: it is "
            "shared with the owner's API and the other widgets and hooks that share theirs, so trust "
            "this site's end user ids as much as your own. Applies to conversations started after the change."
        ),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("chat widget")
        verbose_name_plural = _("chat widgets")
        ordering = ["agent", "name"]

    def __str__(self):
        return self.name

    def clean(self):
        references_check(self)
