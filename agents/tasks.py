"""Celery tasks: thin wrappers that take ids and call services."""

from celery import shared_task

from agents.engine.loop import run_advance
from agents.sweeper import runs_sweep


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_advance_task(run_id: str) -> None:
    run_advance(run_id=run_id)


@shared_task(ignore_result=True)
def runs_sweep_task() -> dict:
    return runs_sweep()
