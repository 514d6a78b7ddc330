"""Celery tasks: thin wrappers that take ids and call services."""

from celery import shared_task

from agents.models import Agent, AgentVersion
from evals.gate import RELEASE_REPLAY_TASK, release_replay_filter
from evals.models import EvalRun, EvalRunStatus
from evals.online import ONLINE_SCORE_TASK
from evals.online_scoring import online_scores_make
from evals.replays import ReplayInvalid, replay_again, replay_start
from evals.services import EVAL_COLLECT_TASK, eval_run_collect, eval_run_collect_later, eval_runs_sweep

# An eval run's runs end within their deadlines (or the sweeper ends them); the task follows
# them at this pace until the last one has ended.
POLL_SECONDS = 2.0


@shared_task(name=EVAL_COLLECT_TASK, ignore_result=True)
def eval_run_collect_task(eval_run_id: int) -> None:
    try:
        eval_run = eval_run_collect(eval_run_id=eval_run_id)
    except EvalRun.DoesNotExist:
        return  # deleted meanwhile: nothing left to follow
    if eval_run.status == EvalRunStatus.RUNNING:
        eval_run_collect_later(eval_run_id=eval_run_id, countdown=POLL_SECONDS)


@shared_task(name="evals.tasks.eval_runs_sweep_task", ignore_result=True)
def eval_runs_sweep_task() -> dict:
    """On beat (settings: sweep-eval-runs): a chain of collection tasks that broke (a lost
    message, a worker down when it was due) is picked up here, and no eval run stays running."""
    return eval_runs_sweep()


@shared_task(name=RELEASE_REPLAY_TASK, ignore_result=True)
def release_replay_task(agent_id: int, candidate_id: int, published_id: int, hours: int) -> None:
    """The release gate's replays (evals.gate): the window's production runs on both versions."""
    agent = Agent.objects.filter(pk=agent_id).first()
    versions = {v.pk: v for v in AgentVersion.objects.filter(pk__in=[candidate_id, published_id], agent_id=agent_id)}
    if agent is None or len(versions) != 2:
        return  # deleted meanwhile
    try:
        eval_run = replay_start(
            filter=release_replay_filter(agent=agent, hours=hours), candidate=versions[candidate_id], user=None
        )
    except ReplayInvalid:
        return  # the window's runs aged out meanwhile: the gate finds nothing to replay
    replay_again(eval_run=eval_run, version=versions[published_id], user=None)


@shared_task(name=ONLINE_SCORE_TASK, ignore_result=True)
def online_score_task(run_id: str, picks: list[list]) -> None:
    """The online evaluators picked for a run that ended (evals.online) score it, once each."""
    online_scores_make(run_id=run_id, picks=[(evaluator_id, reason) for evaluator_id, reason in picks])
