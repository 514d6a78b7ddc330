"""Writes for evaluations: starting an eval run (every case N times, each an ordinary run of the
engine in its own conversation) and collecting its results as its runs end.

A case with long-term memory (EvalCase.uses_memory) plays one end user of its own (per case and
repetition) over several conversations: its earlier conversations first, one at a time, then its
own, which is scored. The collection moves it on: once a conversation's run has ended, its memory
extraction is made there and then (engine.memory.memory_extract), and the next conversation
starts. Its memories are kept in the eval run's own scope (`eval:<id>`, written into each run's
Run.sandbox), never in the agent's: an evaluation never reads or writes a real end user's
memories."""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Exists, Max, OuterRef
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Agent, AgentVersion
from agents.releases import DRAFT, PUBLISHED, UnknownVersion, version_target
from agents.selectors import agents_usable_by
from conversations.models import TERMINAL_STATUSES, Message, Run, RunTrigger
from conversations.services import conversation_create, messages_append
from engine.admission import message_submit
from engine.answer_schema import REPAIR_NAME, run_schema
from engine.memory import memory_extract
from engine.snapshots import version_snapshot
from evals.jsonl import CaseLineInvalid, case_from_line
from evals.judge import rubric_check
from evals.metrics import eval_metrics
from evals.models import EvalCase, EvalResult, EvalRun, EvalRunStatus, EvalSuite
from evals.scoring import FINAL_ANSWER, expectations_of, output_schema_check, score_run, unanswered_check
from evals.selectors import eval_results_data, run_case_material, run_observation
from platform_site.celery import app
from workspaces.defaults import default_workspace_id

log = logging.getLogger(__name__)

EVAL_COLLECT_TASK = "evals.tasks.eval_run_collect_task"
CURRENT = "current"  # the draft, by its older name


class VersionNotFound(LookupError):
    pass


class EvalNotAllowed(PermissionDenied):
    """The user may not use the agent, so may not evaluate it either (a 403 in the admin and
    the API)."""


def eval_agent_check(*, user, agent: Agent) -> None:
    """EvalNotAllowed unless `user` may use the agent, by the rule that decides who may talk to
    it (agents.selectors.agents_usable_by: group restrictions, superusers see all): an eval run
    plays the agent's model and tools for whoever starts it, so it is no way round a
    restriction. Every entry point asks this, and eval_run_start asks it again; `user` None is
    the platform itself (a command run without --user)."""
    if user is not None and not agents_usable_by(user=user).filter(pk=agent.pk).exists():
        raise EvalNotAllowed(_("You may not use agent %(agent)s, so you may not evaluate it.") % {"agent": agent.name})


def eval_version_resolve(*, agent: Agent, version: str) -> AgentVersion:
    """The version an evaluation runs: "draft" (also "current": the configuration as edited now),
    "published", or a version number, as agents.releases names them."""
    target = DRAFT if version == CURRENT else version
    if target not in (DRAFT, PUBLISHED):
        try:
            target = int(target)
        except (TypeError, ValueError):
            raise VersionNotFound(f"agent {agent.slug} has no version {version!r}") from None
    try:
        return version_target(agent=agent, target=target)
    except UnknownVersion as exc:
        if target == PUBLISHED:
            raise VersionNotFound(f"agent {agent.slug}: {exc}") from None
        raise VersionNotFound(f"agent {agent.slug} has no version {version!r}") from None


def eval_memory_scope(*, eval_run_id) -> str:
    """Where an eval run's cases keep their memories (engine.memory.memory_target)."""
    return f"eval:{eval_run_id}"


def eval_end_user(*, case: EvalCase, repetition: int) -> str:
    """The end user a memory case plays: its own per case and repetition, so none recalls another's."""
    return f"eval-case-{case.pk}-{repetition}"


def _sandbox(case: EvalCase, eval_run: EvalRun) -> dict:
    tools = {"results": case.tool_results, "live_reads": case.live_reads}
    if case.recorded_calls:
        # A replayed run's calls: the same call gets its recorded result (before "results").
        tools["recorded"] = case.recorded_calls
    if case.uses_memory:
        tools["memory_scope"] = eval_memory_scope(eval_run_id=eval_run.pk)
    return tools


def _case_run_start(*, eval_run: EvalRun, case: EvalCase, repetition: int, user, session: int = 0) -> Run:
    """The run of the case's conversation number `session`: its earlier conversations first, then its own."""
    version = eval_run.agent_version
    earlier = len(case.prior_conversations)
    turns = case.prior_conversations[session] if session < earlier else case.turns
    metadata = {"eval_run": eval_run.pk, "eval_case": case.pk, "repetition": repetition}
    if earlier:
        metadata["conversation"] = session + 1
    conversation = conversation_create(
        agent=version.agent,
        title=f"eval {eval_run.pk}: {case.name} #{repetition}" + (f" ({session + 1}/{earlier + 1})" if earlier else ""),
        metadata=metadata,
        end_user=eval_end_user(case=case, repetition=repetition) if case.uses_memory else "",
    )
    *prior, last = turns
    if prior:
        messages_append(
            conversation_id=conversation.pk,
            run_id=None,
            messages=[{"role": turn["role"], "content": turn["content"]} for turn in prior],
        )
    submission = message_submit(
        conversation=conversation,
        content=last["content"],
        user=user,
        version=version,
        sandbox=_sandbox(case, eval_run),
        trigger=RunTrigger.EVAL,
    )
    return submission.run


def eval_run_start(*, suite: EvalSuite, agent_version: AgentVersion, repetitions: int, user=None) -> EvalRun:
    """Create the eval run and one engine run per case and repetition; they are handed to the
    workers when this commits, and the collection task follows them until they all end.
    EvalNotAllowed when the user may not use the agent (eval_agent_check)."""
    eval_agent_check(user=user, agent=agent_version.agent)
    with transaction.atomic():
        eval_run = EvalRun.objects.create(
            suite=suite, agent_version=agent_version, repetitions=repetitions, created_by=user
        )
        for case in suite.cases.all():
            for repetition in range(1, repetitions + 1):
                run = _case_run_start(eval_run=eval_run, case=case, repetition=repetition, user=user)
                EvalResult.objects.create(eval_run=eval_run, case=case, repetition=repetition, run=run)
        transaction.on_commit(lambda: eval_run_collect_later(eval_run_id=eval_run.pk))
    return eval_run


def eval_run_collect_later(*, eval_run_id, countdown: float = 1.0) -> None:
    try:
        app.tasks[EVAL_COLLECT_TASK].apply_async(args=[eval_run_id], countdown=countdown)
    except Exception:
        # Collection is idempotent: the command and the admin's refresh collect too.
        log.exception("eval run %s: collection task not sent", eval_run_id)


def _score(result: EvalResult) -> None:
    run = result.run
    if run is None:
        checks = [{"kind": "finished", "passed": False, "reason": "the run was purged before it was scored"}]
    else:
        observed = run_observation(run=run)
        case = result.case
        checks = score_run(expectations_of(case), observed)
        if case.answer_rubric.strip() and observed.stop_reason != FINAL_ANSWER:
            checks.append(unanswered_check("rubric", observed.stop_reason))
        elif case.answer_rubric.strip():
            checks.append(
                rubric_check(
                    run=run,
                    config=case.suite.judge_model_config,
                    question=case.turns[-1]["content"],
                    answer=observed.answer,
                    rubric=case.answer_rubric,
                )
            )
        result.tool_calls = len(observed.tool_calls)
        result.valid_tool_calls = sum(call["valid"] for call in observed.tool_calls)
        result.model_turns = run.iterations
        result.total_tokens = run.total_tokens
        result.cost = run.cost
        schema = _schema_check(run)
        if schema is not None:
            checks.append(schema)
        if result.earlier_runs:
            checks.append(_earlier_check(result))
        start = run.started_at or run.created_at
        # Started and finished are stamped by different workers, whose clocks may differ a little.
        latency = int((run.finished_at - start).total_seconds() * 1000) if run.finished_at else None
        result.latency_ms = None if latency is None else max(latency, 0)
    result.checks = checks
    result.passed = all(check["passed"] for check in checks)
    result.scored = True
    result.save()


def _schema_check(run: Run) -> dict | None:
    """The output_schema check of a run held to a schema (the version's, or its own), else None."""
    schema, _repairs = run_schema(run, version_snapshot(run.agent_version_id))
    if schema is None:
        return None
    repairs = Message.objects.filter(run=run, role=Message.Role.USER, name=REPAIR_NAME).count()
    return output_schema_check(stop_reason=run.stop_reason, repairs=repairs, error=run.error)


def _earlier_check(result: EvalResult) -> dict:
    """Whether every earlier conversation of the case was answered; their tokens and cost are the
    case's too (added to the result's), what playing it took."""
    earlier = {str(row["id"]): row for row in Run.objects.filter(pk__in=result.earlier_runs).values()}
    problems = []
    for number, run_id in enumerate(result.earlier_runs, start=1):
        row = earlier.get(run_id)
        if row is None:
            problems.append(f"conversation {number}: its run was purged")
            continue
        result.total_tokens += row["total_tokens"]
        result.cost += row["cost"]
        if row["stop_reason"] != FINAL_ANSWER:
            problems.append(f"conversation {number} ended on {row['stop_reason'] or row['status']}")
    count = len(result.earlier_runs)
    return {
        "kind": "earlier_conversations",
        "passed": not problems,
        "reason": "; ".join(problems) or f"{count} earlier conversation{'s' if count != 1 else ''} answered",
    }


def _conversation_next(result_id, pending) -> bool:
    """Move a memory case on from the conversation whose run ended: its memory extraction now,
    then the next conversation's run. False if that run was the case's own (it is scored)."""
    result = pending.select_related("case", "eval_run__created_by").filter(pk=result_id).first()
    if result is None:
        return True  # scored meanwhile, by another collector
    if result.session >= len(result.case.prior_conversations):
        return False
    if result.run_id is not None:
        # Made here, in order: the next conversation must find what this one told.
        memory_extract(run_id=result.run_id)
    with transaction.atomic():
        # Only if no other collector moved it on meanwhile (the session it read is still the one).
        locked = (
            pending.select_for_update(skip_locked=True, of=("self",))
            .filter(pk=result_id, session=result.session)
            .first()
        )
        if locked is not None:
            eval_run = result.eval_run
            locked.run = _case_run_start(
                eval_run=eval_run,
                case=result.case,
                repetition=result.repetition,
                user=eval_run.created_by,
                session=result.session + 1,
            )
            if result.run_id is not None:
                locked.earlier_runs = [*locked.earlier_runs, str(result.run_id)]
            locked.session = result.session + 1
            locked.save(update_fields=["run", "earlier_runs", "session"])
    return True


class _ScoringFailed(Exception):
    """A result's scoring raised: says which case and repetition, and what was raised."""


def eval_run_fail(*, eval_run_id, reason: str) -> bool:
    """End a running eval run as failed, with the reason; False if it had ended already."""
    return bool(
        EvalRun.objects.filter(pk=eval_run_id, status=EvalRunStatus.RUNNING).update(
            status=EvalRunStatus.FAILED, error=reason[:2000], finished_at=timezone.now()
        )
    )


def eval_run_collect(*, eval_run_id) -> EvalRun:
    """Score every result whose run has ended; once all are scored, store the metrics and end the
    eval run. Safe to call any number of times, from anywhere.

    It cannot leave the eval run running for good: whatever goes wrong while collecting (a case
    whose expectation breaks the scoring, a metric that cannot be computed) ends it as failed,
    with the reason, and the release gate and the command see a failure instead of waiting."""
    if not EvalRun.objects.filter(pk=eval_run_id, status=EvalRunStatus.RUNNING).exists():
        return EvalRun.objects.get(pk=eval_run_id)  # ended: its results are final
    try:
        _collect(eval_run_id)
    except EvalRun.DoesNotExist:
        raise
    except Exception as exc:
        log.exception("eval run %s: collection failed", eval_run_id)
        what = str(exc) if isinstance(exc, _ScoringFailed) else f"{type(exc).__name__}: {exc}"
        eval_run_fail(eval_run_id=eval_run_id, reason=f"collecting the results failed: {what}")
    return EvalRun.objects.get(pk=eval_run_id)


def _collect(eval_run_id) -> None:
    ended = Exists(Run.objects.filter(pk=OuterRef("run_id"), status__in=TERMINAL_STATUSES))
    pending = EvalResult.objects.filter(eval_run_id=eval_run_id, scored=False)
    ready = pending.filter(ended | ~Exists(Run.objects.filter(pk=OuterRef("run_id"))))
    for result_id in list(ready.values_list("pk", flat=True)):
        if _conversation_next(result_id, pending):
            continue
        # Each result is scored under its row's lock, and only if still unscored: two collectors
        # at once (the task, the admin's refresh) never score one twice, so a rubric's judge
        # model is asked once per result.
        with transaction.atomic():
            result = (
                pending.select_for_update(skip_locked=True, of=("self",))
                .select_related("run", "case__suite__judge_model_config")
                .filter(pk=result_id)
                .first()
            )
            if result is not None:
                try:
                    _score(result)
                except Exception as exc:
                    where = f"case {result.case.name} #{result.repetition}"
                    raise _ScoringFailed(f"{where}: {type(exc).__name__}: {exc}") from exc
    eval_run = EvalRun.objects.get(pk=eval_run_id)
    if eval_run.status == EvalRunStatus.RUNNING and not pending.exists():
        metrics = eval_metrics(eval_results_data(eval_run=eval_run), repetitions=eval_run.repetitions)
        EvalRun.objects.filter(pk=eval_run_id, status=EvalRunStatus.RUNNING).update(
            status=EvalRunStatus.COMPLETED, metrics=metrics, finished_at=timezone.now()
        )


def eval_runs_sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Collect every eval run still running (its collection task's message may have been lost)
    and fail those running longer than settings.AGENTRY_EVAL_RUN_DEADLINE_HOURS: their runs end
    within their own deadlines, so one that old has lost its collection for good."""
    now = now or timezone.now()
    deadline = timedelta(hours=settings.AGENTRY_EVAL_RUN_DEADLINE_HOURS)
    counts = {"collected": 0, "failed": 0}
    for eval_run_id in list(EvalRun.objects.filter(status=EvalRunStatus.RUNNING).values_list("pk", flat=True)):
        try:
            eval_run = eval_run_collect(eval_run_id=eval_run_id)
        except EvalRun.DoesNotExist:
            continue
        counts["collected"] += 1
        if eval_run.status == EvalRunStatus.RUNNING and eval_run.started_at < now - deadline:
            counts["failed"] += eval_run_fail(
                eval_run_id=eval_run_id,
                reason=f"its runs did not all end within {settings.AGENTRY_EVAL_RUN_DEADLINE_HOURS:g} hours",
            )
    return counts


def eval_cases_import(*, suite_name: str, lines, workspace_id: int | None = None) -> int:
    """Cases from JSONL lines (jsonl.case_from_line) into the workspace's suite of that name
    (`workspace_id`: the first workspace when None; created if new), all or none; a case with the
    name of one already in the suite replaces it. Raises CaseLineInvalid naming the first bad line.
    Another workspace's suite of the same name is neither written nor in the way."""
    with transaction.atomic():
        suite, _created = EvalSuite.objects.get_or_create(
            workspace_id=workspace_id or default_workspace_id(), name=suite_name
        )
        count = 0
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            data = case_from_line(line, number=number)
            case = EvalCase.objects.filter(suite=suite, name=data["name"]).first() or EvalCase(suite=suite)
            for key, value in data.items():
                setattr(case, key, value)
            try:
                case.full_clean(exclude=["suite"])
            except ValidationError as exc:
                raise CaseLineInvalid(f"line {number}: {'; '.join(exc.messages)}") from exc
            case.save()
            count += 1
    return count


def eval_case_from_run(*, run: Run, suite: EvalSuite, name: str) -> EvalCase:
    """A new case of the suite that replays the run: its conversation up to the run's user
    message, the tool calls it made as expected calls (arguments as a JSON subset), and what they
    returned as the case's tool results, so a replay stubs those tools (write tools included)
    instead of calling them. The answer's expectations are left for the operator. Raises
    ValidationError (a duplicate name, a run without a user message) and saves nothing then."""
    material = run_case_material(run=run)
    if material is None:
        raise ValidationError({"turns": _("This run has no user message to make a case of.")})
    position = suite.cases.aggregate(last=Max("position"))["last"]
    case = EvalCase(
        suite=suite, name=name, position=0 if position is None else position + 1, source_run=run, **material
    )
    case.full_clean()
    case.save()
    return case
