from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = _("Configuration audit")

    def ready(self):
        from audit.recording import receivers_connect

        # One set of receivers per audited model (sender=…): saving a run, a model call or any
        # other ledger row calls none of them.
        receivers_connect()
