from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = _("Alerts")

    def ready(self):
        # Register the evaluation task in every process: beat names it in the schedule.
        from alerts import tasks  # noqa: F401
