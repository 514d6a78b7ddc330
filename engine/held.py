"""A tool step's last commit, held back to ride the statement of the model call that follows it.

A tool step ends with a commit of the calls' outcomes and the step's tool messages
(engine.tool_step), and the loop's next step is usually a model call, whose attempt row commits
before the request (engine.model_call). Nothing outside the database waits on the first commit:
the second one may carry it. The loop holds the step's batch here instead of committing it; the
attempt's batch is built on it (take), so the two are one statement, under the guard of the first
with one more condition: that no cancel was accepted meanwhile (the step boundary's check, which
the held commit would otherwise have returned to the loop). Every other way out of the step
commits the held batch first (flush): the run's end (engine.runs.run_finish), a requeue at the
end of a time slice, the end of the worker's slice whatever happened.

What holding changes is what an asynchronous commit already allowed (conversations.batch): a
crash before the next commit loses the step's outcome, and the run is found as if its worker had
stopped during the step. A side-effecting call was marked started in an earlier commit, so it is
then reported as interrupted, never run again; a read is run again. Held batches live in this
process only, one per run, and a run is advanced by one worker at a time (its lease).
"""

from conversations.batch import Batch
from conversations.fencing import LeaseLost

_held: dict[str, Batch] = {}


def commit_hold(run_id, batch: Batch) -> None:
    """Hold `batch`, the run's step's last commit, for the run's next statement."""
    _held[str(run_id)] = batch


def commit_held(run_id) -> bool:
    """Whether a commit of the run's is held."""
    return str(run_id) in _held


def commit_take(run_id) -> Batch | None:
    """The run's held batch, now the caller's to commit (with its own writes, or flush it)."""
    return _held.pop(str(run_id), None)


def commit_flush(run_id) -> None:
    """Commit the run's held batch on its own, if there is one (asynchronously, as the tool step
    would have). LeaseLost if the worker lost the run meanwhile: its outcome is not recorded."""
    batch = commit_take(run_id)
    if batch is not None:
        batch_commit(batch, run_id)


def batch_commit(batch: Batch, run_id, *, asynchronous: bool = True) -> dict:
    """Execute a step's batch (asynchronously committed unless told otherwise: see
    conversations.batch); LeaseLost if its guard found the run no longer this worker's."""
    results = batch.execute(asynchronous_commit=asynchronous)
    if results is None:
        raise LeaseLost(str(run_id))
    return results
