"""Agents' schedules: when a schedule fires, what it says, and beat's tick that fires them.

Fire times are instants (UTC). A cron expression is read on the wall clock of the schedule's
time zone, stepped in local time and placed with zoneinfo, so a daily 09:00 stays 09:00 across a
clock change. A wall time the clock skips (02:30 the night it springs forward) fires as if the
clock had not jumped (zoneinfo's fold=0: 03:30 new time); a wall time the clock repeats fires once,
at its first occurrence. An interval fires on a grid through the fire time set when the schedule
was saved or resumed, so its fires do not drift with the tick.

The tick (schedules_fire_due) fires each due schedule in a transaction of its own, holding the
schedule's row (skip_locked: an overlapping tick leaves it to the one holding it, then finds it
no longer due); ScheduleFire's unique (schedule, fire_at) is the last guard. docs/schedules.md
describes the policies.
"""

import logging
import zoneinfo
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from croniter import croniter
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.prompting import prompt_text_render, prompt_variables
from conversations.models import Run, RunTrigger
from conversations.services import conversation_create
from engine.admission import conversation_start, message_submit
from engine.admission_limits import AdmissionRefused
from engine.dispatch import ACTIVE_STATUSES
from triggers.models import Schedule, ScheduleFire

log = logging.getLogger(__name__)

MIN_INTERVAL_SECONDS = 60
# A short template can render a huge message ({% for %} over a padded string).
MAX_MESSAGE_CHARS = 100_000
# After a long downtime of a frequent schedule the fires missed are counted up to this many
# (a fire's `covers`); the next fire time is then found from now, not by stepping.
MAX_COUNTED_FIRES = 10_000
# Schedules fired per tick at most: the rest are due still and fired by the next tick.
MAX_FIRES_PER_TICK = 500


def grace() -> timedelta:
    """How late a fire may be and still count as on time: two ticks of beat."""
    return timedelta(seconds=2 * settings.AGENTRY_SCHEDULE_TICK_SECONDS)


# --- When -----------------------------------------------------------------------------------


def next_fire_after(schedule, after: datetime, *, anchor: datetime | None = None) -> datetime:
    """The first fire time strictly after `after` (aware), in UTC. `schedule` is a Schedule or
    anything with its kind, cron, interval_seconds and time_zone. An interval's fire times are a
    grid through `anchor` (by default the schedule's next fire time; with none, `after`: a
    schedule saved or resumed fires one interval later)."""
    if schedule.kind == Schedule.Kind.INTERVAL:
        step = timedelta(seconds=schedule.interval_seconds)
        anchor = anchor or getattr(schedule, "next_fire_at", None) or after
        if after < anchor:
            return anchor.astimezone(UTC)
        return (anchor + ((after - anchor) // step + 1) * step).astimezone(UTC)
    tz = zoneinfo.ZoneInfo(schedule.time_zone)
    steps = croniter(schedule.cron, after.astimezone(tz).replace(tzinfo=None))
    # Wall times are stepped in order; after a clock change some of them lie at or before
    # `after` (an hour repeated, a skipped time moved forward), and are passed over.
    while True:
        at = steps.get_next(datetime).replace(tzinfo=tz).astimezone(UTC)
        if at > after:
            return at


@dataclass(frozen=True)
class DueFires:
    """What a due schedule does at `now`: start a run for `fire_at` (None: none) standing for
    `covers` fire times, record `skipped` missed fire times under `skipped_at`, and fire next at
    `next_fire_at`."""

    fire_at: datetime | None
    covers: int
    skipped_at: datetime | None
    skipped: int
    next_fire_at: datetime


def due_fires(schedule, *, next_fire_at: datetime, now: datetime, coalesce: bool = False) -> DueFires | None:
    """None when nothing is due. Else the fire times from `next_fire_at` up to `now` are due;
    they were missed (beat was down) when there are several or the one is older than the grace.
    Missed, ONCE starts one run for the latest covering them all; SKIP records them as skipped
    and starts a run only for a fire time within the grace. `coalesce`: the due times waited
    behind a running run (Overlap.QUEUE), so they are one fire whatever the missed policy."""
    if next_fire_at > now:
        return None
    due = [next_fire_at]
    while len(due) < MAX_COUNTED_FIRES:
        following = next_fire_after(schedule, due[-1], anchor=next_fire_at)
        if following > now:
            break
        due.append(following)
    following = next_fire_after(schedule, now, anchor=next_fire_at)
    late = now - grace()
    if len(due) == 1 and due[0] >= late:
        return DueFires(due[0], 1, None, 0, following)
    if coalesce or schedule.missed == Schedule.Missed.ONCE:
        return DueFires(due[-1], len(due), None, 0, following)
    on_time = [at for at in due if at >= late]
    missed = due[: len(due) - len(on_time[-1:])]
    return DueFires(on_time[-1] if on_time else None, 1, missed[-1] if missed else None, len(missed), following)


# --- What -----------------------------------------------------------------------------------


def message_render(schedule, *, fire_at: datetime) -> str:
    """The message of the fire at `fire_at`: its template over the fire time in the schedule's
    time zone (fire_time, date, time, weekday...), the schedule's name and its variables (`vars`)."""
    context = prompt_variables(now=fire_at, time_zone=schedule.time_zone, agent_name=schedule.agent.name)
    local = fire_at.astimezone(zoneinfo.ZoneInfo(schedule.time_zone))
    context |= {
        "fire_time": local.isoformat(timespec="seconds"),
        "schedule": schedule.name,
        "vars": schedule.variables or {},
    }
    rendered = prompt_text_render(schedule.message, context)
    if len(rendered) > MAX_MESSAGE_CHARS:
        raise ValueError(
            _("The message renders to %(size)s characters; at most %(limit)s are allowed.")
            % {"size": len(rendered), "limit": MAX_MESSAGE_CHARS}
        )
    if not rendered.strip():
        raise ValueError(_("The message renders to nothing."))
    return rendered


def schedule_check(schedule) -> None:
    """ValidationError (by field) unless the schedule can fire: its kind's fields set and valid,
    a known time zone, and a message that renders now."""
    errors = {}
    if schedule.time_zone not in zoneinfo.available_timezones():
        errors["time_zone"] = _("Unknown time zone %(zone)s; use an IANA name such as Asia/Shanghai.") % {
            "zone": schedule.time_zone
        }
    if schedule.kind == Schedule.Kind.CRON:
        if len(schedule.cron.split()) != 5 or not croniter.is_valid(schedule.cron):
            errors["cron"] = _("Not a cron expression of five fields (minute hour day month weekday).")
        elif "time_zone" not in errors:
            try:
                next_fire_after(schedule, timezone.now())
            except Exception:  # noqa: BLE001 - croniter's own errors: a date that never comes
                errors["cron"] = _("This cron expression never fires.")
        if schedule.interval_seconds is not None:
            errors["interval_seconds"] = _("Leave the interval empty for a cron schedule.")
    else:
        if schedule.cron:
            errors["cron"] = _("Leave the cron expression empty for an interval schedule.")
        if schedule.interval_seconds is None or schedule.interval_seconds < MIN_INTERVAL_SECONDS:
            errors["interval_seconds"] = _("An interval is at least %(seconds)s seconds.") % {
                "seconds": MIN_INTERVAL_SECONDS
            }
    if not isinstance(schedule.variables, dict):
        errors["variables"] = _("Variables are a JSON object.")
    if not errors:
        try:
            message_render(schedule, fire_at=timezone.now())
        except Exception as exc:  # noqa: BLE001 - whatever a template raises, every fire would raise it too
            errors["message"] = _("The message cannot be rendered: %(error)s") % {
                "error": str(exc) or type(exc).__name__
            }
    if errors:
        raise ValidationError(errors)


# --- The tick -------------------------------------------------------------------------------


def schedules_fire_due(*, now: datetime | None = None) -> dict:
    """Fire every enabled schedule due at `now`; the count of each outcome. The read costs one
    statement whatever the number of schedules not due (the partial index schedule_due_idx)."""
    now = now or timezone.now()
    outcomes = Counter()
    due = Schedule.objects.filter(enabled=True, next_fire_at__lte=now).order_by("next_fire_at")
    for schedule_id in list(due.values_list("pk", flat=True)[:MAX_FIRES_PER_TICK]):
        try:
            with transaction.atomic():
                outcomes.update(_schedule_fire(schedule_id=schedule_id, now=now))
        except IntegrityError:
            # Another tick recorded this fire time first (the unique constraint): nothing to do.
            outcomes["duplicate"] += 1
        except Exception:
            # Left due, it is tried again next tick; the other schedules fire meanwhile.
            log.exception("schedule %s could not be fired", schedule_id)
            outcomes["error"] += 1
    return dict(outcomes)


def _schedule_fire(*, schedule_id, now: datetime) -> list[str]:
    """In the caller's transaction: fire one schedule if it is still due and no other tick holds it."""
    schedule = (
        Schedule.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("agent__workspace", "conversation")
        .filter(pk=schedule_id, enabled=True, next_fire_at__lte=now)
        .first()
    )
    if schedule is None:
        return []
    previous = _previous_run(schedule)
    running = previous is not None and previous.status in ACTIVE_STATUSES
    if running and schedule.overlap == Schedule.Overlap.QUEUE:
        return ["waiting"]  # due still: the next tick after the run ends fires it
    # A QUEUE fire that waited: the run it waited for ended after the fire time came.
    waited = (
        schedule.overlap == Schedule.Overlap.QUEUE
        and previous is not None
        and previous.finished_at is not None
        and previous.finished_at > schedule.next_fire_at
    )
    plan = due_fires(schedule, next_fire_at=schedule.next_fire_at, now=now, coalesce=waited)
    outcomes = []
    if plan.skipped:
        _record(schedule, plan.skipped_at, ScheduleFire.Outcome.SKIPPED_MISSED, covers=plan.skipped)
        outcomes.append(ScheduleFire.Outcome.SKIPPED_MISSED)
    if plan.fire_at is not None:
        if running and schedule.overlap == Schedule.Overlap.SKIP:
            _record(schedule, plan.fire_at, ScheduleFire.Outcome.SKIPPED_RUNNING, covers=plan.covers)
            outcomes.append(ScheduleFire.Outcome.SKIPPED_RUNNING)
        else:
            outcomes.append(_start(schedule, plan))
    schedule.next_fire_at = plan.next_fire_at
    if plan.fire_at is not None:
        schedule.last_fired_at = plan.fire_at
    schedule.save(update_fields=["next_fire_at", "last_fired_at", "conversation", "updated_at"])
    return outcomes


def _previous_run(schedule: Schedule) -> Run | None:
    """The run to compare with: the running conversation's latest (SAME: whoever posted it), else
    the run of the schedule's latest fire that started one."""
    if schedule.conversation_policy == Schedule.ConversationPolicy.SAME and schedule.conversation_id:
        return Run.objects.filter(conversation_id=schedule.conversation_id).order_by("-created_at").first()
    fire = schedule.fires.filter(run__isnull=False).select_related("run").order_by("-fire_at").first()
    return fire.run if fire else None


def _start(schedule: Schedule, plan: DueFires) -> str:
    """The fire's run, or a fire saying why there is none: SKIPPED_LIMITED when the agent's
    limits per end user refuse the schedule's end user (as they refuse any way in), else FAILED."""
    # A conversation created for this fire is rolled back with it when it starts no run.
    had_conversation = schedule.conversation
    try:
        with transaction.atomic():  # a failed post leaves the fire's own writes to record it
            content = message_render(schedule, fire_at=plan.fire_at)
            if schedule.conversation_policy == Schedule.ConversationPolicy.NEW:
                run = conversation_start(
                    agent=schedule.agent,
                    user=schedule.owner,
                    content=content,
                    title=schedule.name,
                    end_user=schedule.end_user,
                    trigger=RunTrigger.SCHEDULE,
                )
            else:
                if schedule.conversation is None:
                    schedule.conversation = conversation_create(
                        agent=schedule.agent, owner=schedule.owner, title=schedule.name, end_user=schedule.end_user
                    )
                run = message_submit(
                    conversation=schedule.conversation,
                    content=content,
                    user=schedule.owner,
                    trigger=RunTrigger.SCHEDULE,
                ).run
    except AdmissionRefused as exc:
        schedule.conversation = had_conversation
        log.info("schedule %s: fire at %s refused: %s", schedule.pk, plan.fire_at, exc.message)
        _record(schedule, plan.fire_at, ScheduleFire.Outcome.SKIPPED_LIMITED, covers=plan.covers, detail=exc.message)
        return ScheduleFire.Outcome.SKIPPED_LIMITED
    except Exception as exc:  # noqa: BLE001 - one schedule's failure never stops the others
        schedule.conversation = had_conversation
        log.warning("schedule %s: fire at %s failed: %s", schedule.pk, plan.fire_at, exc)
        _record(schedule, plan.fire_at, ScheduleFire.Outcome.FAILED, covers=plan.covers, detail=str(exc) or repr(exc))
        return ScheduleFire.Outcome.FAILED
    _record(schedule, plan.fire_at, ScheduleFire.Outcome.STARTED, covers=plan.covers, run=run)
    return ScheduleFire.Outcome.STARTED


def _record(schedule: Schedule, fire_at: datetime, outcome: str, *, covers: int, run=None, detail: str = ""):
    ScheduleFire.objects.create(
        schedule=schedule, fire_at=fire_at, outcome=outcome, covers=covers, run=run, detail=detail[:2000]
    )


# --- Pausing --------------------------------------------------------------------------------


def schedule_save(*, schedule: Schedule, now: datetime | None = None) -> Schedule:
    """Save the schedule with its next fire time worked out from now (edited, resumed: the
    fire times before now are not owed). A paused schedule keeps none."""
    now = now or timezone.now()
    schedule.next_fire_at = next_fire_after(schedule, now, anchor=now) if schedule.enabled else None
    schedule.save()
    return schedule


def schedules_pause(*, schedules) -> int:
    """Pause these schedules; how many were running. Each is saved (the audit hears saves),
    locked first so a fire landing meanwhile does not put its next fire time back."""
    paused = 0
    with transaction.atomic():
        for schedule in Schedule.objects.select_for_update().filter(pk__in=[s.pk for s in schedules], enabled=True):
            schedule.enabled, schedule.next_fire_at = False, None
            schedule.save(update_fields=["enabled", "next_fire_at", "updated_at"])
            paused += 1
    return paused


def schedules_resume(*, schedules, now: datetime | None = None) -> int:
    """Resume these schedules from now (the fires of the pause are not owed); how many were paused."""
    resumed = 0
    for schedule in Schedule.objects.filter(pk__in=[s.pk for s in schedules], enabled=False):
        schedule.enabled = True
        schedule_save(schedule=schedule, now=now)
        resumed += 1
    return resumed
