"""Answers in a schema, in a run (docs/quality.md): which schema a run's answer must match, how
many repair turns it has, and the repair turn itself.

The decision is engine.next_step's (a pure function): a final answer that matches is the run's
answer, its parsed value kept on the run (Run.output_parsed) by the commit that ends the run; one that
does not is sent back (Repair) while repair turns are left, then the run ends (schema_invalid).

A repair turn is a ledger row like any other: a user-role message the model sees, written by
the platform (its `name` says so: the requester's own messages never carry it, and the name of a
user message is not sent to providers), saying what is wrong with the answer, and an
answer.repair event on the run's timeline. Both are written in one transaction under the lease's
fence; the model is then called again by the next step.
"""

from django.db import transaction
from django.utils.translation import gettext_lazy as _

from agents.snapshot import AgentSnapshot, snapshot_output
from conversations import events
from conversations.batch import run_event_append
from conversations.events import EventType
from conversations.models import Message, Run
from conversations.services import messages_append
from engine.speech import agent_says

# The `name` of a repair turn's message: the platform's, not the requester's.
REPAIR_NAME = "platform.schema_repair"
# The repair turns a request's own schema gets (a /v1 response_format) when its agent declares
# none: the field's default.
DEFAULT_REPAIR_TURNS = 2

REPAIR_MESSAGE = _(
    "[Platform check, not the user] Your last answer does not match the JSON Schema this answer must "
    "follow:\n{errors}\nAnswer again with only the JSON value, matching the schema, and no other text."
)
SCHEMA_INVALID_MESSAGE = _(
    "I stopped here: my answer had to follow a fixed format, and after {tries} tries it still did not. "
    "Please try again, or rephrase the question."
)


def run_schema(run: Run, snapshot: AgentSnapshot) -> tuple[dict | None, int]:
    """The schema the run's answer must match (None: any text) and its repair turns: the run's
    own (its request's), else the version's."""
    schema, repairs = snapshot_output(snapshot)
    if run.output_schema is not None:
        return run.output_schema, repairs if schema is not None else DEFAULT_REPAIR_TURNS
    return schema, repairs


def repairs_made(messages: list[Message], run_id) -> int:
    """How many repair turns the run has had."""
    return sum(1 for m in messages if m.run_id == run_id and m.role == Message.Role.USER and m.name == REPAIR_NAME)


def repair_text(snapshot: AgentSnapshot, errors: list[str]) -> str:
    return agent_says(snapshot, REPAIR_MESSAGE, errors="\n".join(f"- {error}" for error in errors))


def answer_repair(
    *, run: Run, owner: str, snapshot: AgentSnapshot, answer: Message, errors: list[str], repair: int, of: int
) -> None:
    """Write repair turn `repair` of at most `of` for `answer`, the model's last message, which
    fails the schema with `errors`: the message and its event, fenced by the lease (LeaseLost if
    another worker holds the run now)."""
    with transaction.atomic():
        messages_append(
            conversation_id=run.conversation_id,
            run_id=run.pk,
            messages=[{"role": Message.Role.USER, "content": repair_text(snapshot, errors), "name": REPAIR_NAME}],
        )
        payload = events.answer_repair(llm_call_id=answer.llm_call_id, repair=repair, of=of, errors=errors)
        run_event_append(run_id=run.pk, type=EventType.ANSWER_REPAIR, payload=payload, lease_owner=owner)
