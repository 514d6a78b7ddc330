from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


def _operators_see_firings(sender, **kwargs):
    # Imported when the signal fires: permissions imports models, which cannot be imported
    # while the app registry is still loading this module.
    from alerts.permissions import operators_see_firings

    operators_see_firings()


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = _("Alerts")

    def ready(self):
        # Register the evaluation task in every process: beat names it in the schedule.
        from alerts import tasks  # noqa: F401

        # After every migrate (and every test-database flush) Operators may see alert firings.
        post_migrate.connect(_operators_see_firings, sender=self)
