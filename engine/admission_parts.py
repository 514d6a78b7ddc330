"""Whether a run's models can be sent the parts posted with it: the one check every way in meets
(engine.admission, when it writes the run), on the version the run is pinned to.

A part is taken when every model a step may call takes its kind (agents.snapshot.snapshot_models:
the agent's model and its fallback; ModelConfig.input_kinds), since either may end up answering;
otherwise it must be turned into text before the step (the agent's conversions, in the snapshot:
engine.part_conversion), and that text is what both models are sent. A part neither taken nor
convertible refuses the post (PartNotTaken, a 400): nothing is written.
"""

from collections.abc import Sequence

from django.utils.translation import gettext as _

from agents.snapshot import AgentSnapshot, model_input_kinds, snapshot_conversions, snapshot_models
from attachments.models import Attachment
from attachments.sniff import AttachmentRefused


class PartNotTaken(AttachmentRefused):
    """A part of a kind the run's models do not take and the agent does not turn into text."""


def taken_kinds(snapshot: AgentSnapshot) -> set[str]:
    """The kinds every model of the snapshot takes."""
    kinds = [set(model_input_kinds(model)) for model in snapshot_models(snapshot)]
    return set.intersection(*kinds)


def conversion_for(snapshot: AgentSnapshot, kind: str) -> str | None:
    """How the snapshot turns a part of `kind` into text (agents.models.AudioParts and kin), if
    its models do not all take it; None when they do."""
    if kind in taken_kinds(snapshot):
        return None
    conversions = snapshot_conversions(snapshot)
    return conversions["kinds"].get(kind) if conversions else None


def parts_check(snapshot: AgentSnapshot, attachments: Sequence[Attachment]) -> None:
    """Raises PartNotTaken for the first attachment the snapshot's models do not take and its
    agent does not turn into text."""
    taken = taken_kinds(snapshot)
    for attachment in attachments:
        if attachment.kind in taken or conversion_for(snapshot, attachment.kind):
            continue
        raise PartNotTaken(
            "input_kind",
            _(
                "The attachment “%(name)s” is %(kind)s, which this agent's model does not take (it takes: "
                "%(taken)s), and the agent is not set to turn %(kind)s into text."
            )
            % {"name": attachment.name, "kind": attachment.kind, "taken": ", ".join(sorted(taken))},
        )
