from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EvalsConfig(AppConfig):
    """Publishing and promoting ask evals.gate through settings.AGENTRY_RELEASE_CHECKS."""

    name = "evals"
    verbose_name = _("Evaluations")

    def ready(self):
        # The collection task is sent by name from the services; every process registers it.
        from evals import tasks  # noqa: F401
