"""Celery tasks: thin wrappers that take ids and call services.

The names are the ones these tasks had before the engine became its own app, so messages
already on the broker (and the beat schedule, and the routes) still find them.
"""

from celery import shared_task

from engine.approvals import approvals_expire
from engine.dispatch import RUN_ADVANCE_TASK
from engine.loop import run_advance
from engine.reactor import reactor
from engine.retention import idempotency_keys_sweep, retention_sweep
from engine.sweeper import runs_sweep


@shared_task(name=RUN_ADVANCE_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_advance_task(run_id: str) -> None:
    reactor.carry(run_advance, run_id=run_id)


@shared_task(name="agents.tasks.runs_sweep_task", ignore_result=True)
def runs_sweep_task() -> dict:
    return runs_sweep()


@shared_task(name="conversations.tasks.approvals_expire_task", ignore_result=True)
def approvals_expire_task() -> int:
    return approvals_expire()


@shared_task(name="engine.tasks.retention_sweep_task", ignore_result=True)
def retention_sweep_task() -> dict:
    return retention_sweep()


@shared_task(name="engine.tasks.idempotency_keys_expire_task", ignore_result=True)
def idempotency_keys_expire_task() -> int:
    return idempotency_keys_sweep()
