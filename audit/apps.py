from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = _("Configuration audit")

    def ready(self):
        from audit.erasure import case_changes_erase, no_runs
        from audit.recording import receivers_connect
        from memory.forget import RunCopies, run_copies_register

        # One set of receivers per audited model (sender=…): saving a run, a model call or any
        # other ledger row calls none of them.
        receivers_connect()
        # Forgetting an end user reaches the audit rows of the eval cases made from their runs.
        run_copies_register(RunCopies(runs=no_runs, erase=case_changes_erase))
