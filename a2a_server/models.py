"""Where an A2A client asked to be told of a task's changes: one row per push notification
config (A2A's TaskPushNotificationConfig), on the run that is the task."""

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from platform_site.crypto import EncryptedTextField


class PushConfig(models.Model):
    # Its workspace is its run's agent's (workspaces.access.in_workspace).
    workspace_path = "run__agent__workspace"
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(
        "conversations.Run", on_delete=models.CASCADE, related_name="a2a_push_configs", verbose_name=_("run")
    )
    # The client's id for the config (A2A's `id`), unique per task.
    name = models.CharField(max_length=200, verbose_name=_("name"))
    url = models.URLField(max_length=500, verbose_name=_("URL"))
    # The signing key of the notifications (the client's `token`, or one generated for it).
    token = EncryptedTextField(verbose_name=_("token"))
    auth_scheme = models.CharField(max_length=50, blank=True, default="", verbose_name=_("authentication scheme"))
    auth_credentials = EncryptedTextField(blank=True, default="", verbose_name=_("authentication credentials"))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("created by")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("A2A push notification config")
        verbose_name_plural = _("A2A push notification configs")
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="a2a_push_config_name_unique")]

    def __str__(self):
        return f"{self.run_id} → {self.url}"
