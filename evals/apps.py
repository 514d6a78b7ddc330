from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EvalsConfig(AppConfig):
    name = "evals"
    verbose_name = _("Evaluations")

    def ready(self):
        from agents.releases import release_check_register
        from alerts.selectors import online_scores_register
        from conversations.batch import run_event_listener_register
        from conversations.feedback import run_feedback_listener_register
        from evals import tasks  # noqa: F401  (the collection task is sent by name: every process registers it)
        from evals.erasure import case_copies_erase, case_copy_runs, no_copy_runs, online_scores_erase
        from evals.gate import release_gate_check
        from evals.online import LISTENER, feedback_heard
        from evals.online_selectors import online_scores_window
        from memory.forget import RunCopies, run_copies_register

        # Publishing and promoting a canary ask the release gate, wherever they are done.
        release_check_register(release_gate_check)
        # Forgetting an end user reaches the cases made from their runs and the runs that played them.
        run_copies_register(RunCopies(runs=case_copy_runs, erase=case_copies_erase))
        run_copies_register(RunCopies(runs=no_copy_runs, erase=online_scores_erase))
        # Online evaluation: a production run's end and a negative rating pick the runs scored,
        # and an alert rule can watch the scores.
        run_event_listener_register(LISTENER)
        run_feedback_listener_register(feedback_heard)
        online_scores_register(online_scores_window)
