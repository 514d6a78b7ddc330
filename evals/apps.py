from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EvalsConfig(AppConfig):
    name = "evals"
    verbose_name = _("Evaluations")

    def ready(self):
        from agents.releases import release_check_register
        from evals import tasks  # noqa: F401  (the collection task is sent by name: every process registers it)
        from evals.erasure import case_copies_erase, case_copy_runs
        from evals.gate import release_gate_check
        from memory.forget import RunCopies, run_copies_register

        # Publishing and promoting a canary ask the release gate, wherever they are done.
        release_check_register(release_gate_check)
        # Forgetting an end user reaches the cases made from their runs and the runs that played them.
        run_copies_register(RunCopies(runs=case_copy_runs, erase=case_copies_erase))
