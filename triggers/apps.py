from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TriggersConfig(AppConfig):
    name = "triggers"
    verbose_name = _("Triggers")

    def ready(self):
        # Register the beat task in every process: beat names it in the schedule.
        from triggers import tasks  # noqa: F401
