"""Forgetting an end user reaches the audit: an eval case made from their run holds their words
(its turns, expected calls and answers), and so do the audit rows of that case. Those rows keep
which fields changed, when and by whom; their values are blanked (memory.forget calls this)."""

from django.contrib.contenttypes.models import ContentType

from audit.models import ConfigChange
from evals.models import EvalCase

ERASED = "(erased)"


def no_runs(*, run_ids: set) -> set:
    """The audit makes no runs from the rows it keeps."""
    return set()


def case_changes_erase(*, run_ids: set) -> dict[str, int]:
    wanted = {str(pk) for pk in run_ids}
    case_type = ContentType.objects.get_for_model(EvalCase)
    rows = ConfigChange.objects.filter(content_type=case_type)
    cases = {str(pk) for pk in EvalCase.objects.filter(source_run_id__in=run_ids).values_list("pk", flat=True)}
    # A case deleted since is found by the run its rows name.
    cases |= {
        object_id
        for object_id, changes in rows.values_list("object_id", "changes")
        if wanted.intersection(value for value in changes.get("source_run", ()) if value is not None)
    }
    erased = []
    for change in rows.filter(object_id__in=cases).only("pk", "changes"):
        change.changes = {
            field: [None if value is None else ERASED for value in pair] for field, pair in change.changes.items()
        }
        erased.append(change)
    ConfigChange.objects.bulk_update(erased, ["changes"], batch_size=500)
    return {"config_changes_anonymised": len(erased)} if erased else {}
