"""Celery tasks: thin wrappers that take ids and call services.

Each task is named for where it lives (engine.tasks.<function>). Three of them had other names
before the engine became its own app, and a message carries its task's name: messages sent under
a former name (queued before an upgrade, or sent by a process of the previous release during a
rolling one) must still run. Celery has no alias for a task name, so each former name is a task
of its own over the same function, with the same options and the same queue; nothing here sends
under it. A persisted beat schedule needs none: beat rewrites its entries' task names from
settings.CELERY_BEAT_SCHEDULE, by entry name, when it starts. A former name can go once no
broker of a deployment still holds a message under it. Apps above the engine rename theirs with
`renamed_task` too (notifications.tasks), so FORMER_NAMES lists every former name.
"""

from celery import shared_task
from django.conf import settings

from engine.approvals import approvals_escalate, approvals_expire
from engine.dispatch import RUN_ADVANCE_TASK
from engine.loop import run_advance
from engine.memory import MEMORY_EXTRACT_TASK, memory_extract
from engine.reactor import reactor
from engine.retention import idempotency_keys_sweep, retention_sweep
from engine.sweeper import runs_sweep

# Former name -> name.
FORMER_NAMES: dict[str, str] = {}


def renamed_task(*, name: str, formerly: str, **options):
    """shared_task(name=name, **options), registered under `formerly` too."""
    FORMER_NAMES[formerly] = name
    route = settings.CELERY_TASK_ROUTES.get(name, {})

    def register(fun):
        # The former name's task takes its queue from the new name's route, so a message sent
        # under it from this release lands where the task's own would.
        shared_task(name=formerly, **{**route, **options})(fun)
        return shared_task(name=name, **options)(fun)

    return register


@renamed_task(
    name=RUN_ADVANCE_TASK,
    formerly="agents.tasks.run_advance_task",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def run_advance_task(run_id: str) -> None:
    reactor.carry(run_advance, run_id=run_id)


@renamed_task(name="engine.tasks.runs_sweep_task", formerly="agents.tasks.runs_sweep_task", ignore_result=True)
def runs_sweep_task() -> dict:
    return runs_sweep()


@renamed_task(
    name="engine.tasks.approvals_expire_task", formerly="conversations.tasks.approvals_expire_task", ignore_result=True
)
def approvals_expire_task() -> int:
    # Expiry first: an approval that has just ended is not escalated.
    expired = approvals_expire()
    approvals_escalate()
    return expired


@shared_task(name="engine.tasks.retention_sweep_task", ignore_result=True)
def retention_sweep_task() -> dict:
    return retention_sweep()


@shared_task(name="engine.tasks.idempotency_keys_expire_task", ignore_result=True)
def idempotency_keys_expire_task() -> int:
    return idempotency_keys_sweep()


# Not retried: a second delivery finds the run's memory call and does nothing, and the model
# call makes its own attempts (its retries, the fallback model).
@shared_task(name=MEMORY_EXTRACT_TASK, ignore_result=True)
def memory_extract_task(run_id: str) -> None:
    memory_extract(run_id=run_id)
