from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EvalsConfig(AppConfig):
    name = "evals"
    verbose_name = _("Evaluations")

    def ready(self):
        from agents.releases import release_check_register
        from evals import tasks  # noqa: F401  (the collection task is sent by name: every process registers it)
        from evals.gate import release_gate_check

        # Publishing and promoting a canary ask the release gate, wherever they are done.
        release_check_register(release_gate_check)
