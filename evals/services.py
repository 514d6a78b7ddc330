"""Writes for evaluations: starting an eval run (every case N times, each an ordinary run of the
engine in its own conversation) and collecting its results as its runs end."""

import logging

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, Max, OuterRef
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Agent, AgentVersion
from agents.releases import DRAFT, PUBLISHED, UnknownVersion, version_target
from conversations.models import TERMINAL_STATUSES, Run
from conversations.services import conversation_create, messages_append
from engine.admission import message_submit
from evals.jsonl import CaseLineInvalid, case_from_line
from evals.judge import rubric_check
from evals.metrics import eval_metrics
from evals.models import EvalCase, EvalResult, EvalRun, EvalRunStatus, EvalSuite
from evals.scoring import expectations_of, score_run
from evals.selectors import eval_results_data, run_case_material, run_observation
from platform_site.celery import app

log = logging.getLogger(__name__)

EVAL_COLLECT_TASK = "evals.tasks.eval_run_collect_task"
CURRENT = "current"  # the draft, by its older name


class VersionNotFound(LookupError):
    pass


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


def _eval_tools(case: EvalCase) -> dict:
    return {"results": case.tool_results, "live_reads": case.live_reads}


def _case_run_start(*, eval_run: EvalRun, case: EvalCase, repetition: int, user) -> Run:
    version = eval_run.agent_version
    conversation = conversation_create(
        agent=version.agent,
        title=f"eval {eval_run.pk}: {case.name} #{repetition}",
        metadata={"eval_run": eval_run.pk, "eval_case": case.pk, "repetition": repetition},
    )
    *prior, last = case.turns
    if prior:
        messages_append(
            conversation_id=conversation.pk,
            run_id=None,
            messages=[{"role": turn["role"], "content": turn["content"]} for turn in prior],
        )
    submission = message_submit(
        conversation=conversation, content=last["content"], user=user, version=version, eval_tools=_eval_tools(case)
    )
    return submission.run


def eval_run_start(*, suite: EvalSuite, agent_version: AgentVersion, repetitions: int, user=None) -> EvalRun:
    """Create the eval run and one engine run per case and repetition; they are handed to the
    workers when this commits, and the collection task follows them until they all end."""
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
        if case.answer_rubric.strip():
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
        start = run.started_at or run.created_at
        result.latency_ms = int((run.finished_at - start).total_seconds() * 1000) if run.finished_at else None
    result.checks = checks
    result.passed = all(check["passed"] for check in checks)
    result.scored = True
    result.save()


def eval_run_collect(*, eval_run_id) -> EvalRun:
    """Score every result whose run has ended; once all are scored, store the metrics and end the
    eval run. Safe to call any number of times, from anywhere."""
    ended = Exists(Run.objects.filter(pk=OuterRef("run_id"), status__in=TERMINAL_STATUSES))
    pending = EvalResult.objects.filter(eval_run_id=eval_run_id, scored=False)
    ready = pending.filter(ended | ~Exists(Run.objects.filter(pk=OuterRef("run_id"))))
    for result_id in list(ready.values_list("pk", flat=True)):
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
                _score(result)
    eval_run = EvalRun.objects.get(pk=eval_run_id)
    if eval_run.status == EvalRunStatus.RUNNING and not pending.exists():
        metrics = eval_metrics(eval_results_data(eval_run=eval_run), repetitions=eval_run.repetitions)
        EvalRun.objects.filter(pk=eval_run_id, status=EvalRunStatus.RUNNING).update(
            status=EvalRunStatus.COMPLETED, metrics=metrics, finished_at=timezone.now()
        )
        eval_run.refresh_from_db()
    return eval_run


def eval_cases_import(*, suite_name: str, lines) -> int:
    """Cases from JSONL lines (jsonl.case_from_line) into the suite of that name (created if
    new), all or none; a case with the name of one already in the suite replaces it. Raises
    CaseLineInvalid naming the first bad line."""
    with transaction.atomic():
        suite, _created = EvalSuite.objects.get_or_create(name=suite_name)
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
    case = EvalCase(suite=suite, name=name, position=0 if position is None else position + 1, **material)
    case.full_clean()
    case.save()
    return case
