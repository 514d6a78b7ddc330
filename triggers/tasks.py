"""Beat tasks of the triggers app: thin wrappers over triggers.schedules."""

from celery import shared_task

from triggers.schedules import schedules_fire_due


# Not retried: a fire the tick could not make is still due, and the next tick (one beat
# interval later) makes it.
@shared_task(name="triggers.tasks.schedules_tick_task", ignore_result=True)
def schedules_tick_task() -> dict:
    return schedules_fire_due()
