from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EvalsConfig(AppConfig):
    name = "evals"
    verbose_name = _("Evaluations")

    def ready(self):
        # The collection task is sent by name from the services; every process registers it.
        from agents.releases import release_check_register
        from evals import tasks  # noqa: F401
        from evals.gate import release_gate_check

        # Publishing and promoting ask the gate (agents cannot import evals: it sits below).
        release_check_register(release_gate_check)
