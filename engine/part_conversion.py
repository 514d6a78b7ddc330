"""The pre-step: parts the run's models do not take, turned into text before the step's model call.

Admission let a part through only if every model of the version takes its kind or the agent
turns it into text (engine.admission_parts). Before each model step (engine.llm_step), every part
of the messages to be sent that is to be turned into text gets its text: the PartText row of its
attachment and method, read once for all of them, or made now:

- transcription (audio): the agent's transcription model config, over OpenAI's
  /audio/transcriptions (agents.providers.transcription), as a model call with its attempts and
  retries (engine.model_call): an LLMCall of purpose transcription in the run's ledger, priced by
  the minute of audio, its cost in the run's totals;
- description (image): the agent's description model, a chat call with the image and a fixed
  instruction: an LLMCall of purpose description;
- ocr (image) and extraction (file): knowledge's readers (RapidOCR; PDF, Word, Excel, PowerPoint,
  CSV, text) in the limited child process (knowledge.parsing): nothing is decoded in the worker.

The text is written with its call's completion (or alone, for the local readers), with a
`part.converted` event, and is made once per attachment and method: later steps and runs reuse
it. Then the input guardrails screen it like typed text (engine.guardrails.converted_check): a
blocking rule ends the run, a redacting one changes what models are shown. A part whose text
cannot be made ends the run (PartConversionFailed: provider_error, saying which part and why).
A step whose messages carry no part to convert costs nothing here: no query.
"""

import time
from dataclasses import dataclass

from django.utils.translation import gettext as _

from agents.providers.transcription import transcription_body, transcription_cost, transcription_send
from agents.snapshot import AgentSnapshot, snapshot_conversions
from attachments.models import Attachment, PartText, PartTextMethod
from attachments.parts import ref
from attachments.services import AttachmentMissing, attachment_read
from conversations import events
from conversations.batch import Batch, event_add, row_insert, run_guard
from conversations.events import EventType
from conversations.fencing import LeaseLost
from conversations.models import LLMCall, Message, Run
from engine.admission_parts import conversion_for
from engine.guardrails import ConvertedText, converted_check
from engine.model_call import CustomCall, ModelRequest, ModelStepFailed, answer_record, answer_writes, model_call
from engine.next_step import Finish
from knowledge.extract import ExtractionFailed
from knowledge.parsing import sections_from_bytes_limited
from knowledge.sections import section_text
from platform_site import green

METHODS = {
    "transcribe": PartTextMethod.TRANSCRIPTION,
    "ocr": PartTextMethod.OCR,
    "describe": PartTextMethod.DESCRIPTION,
    "extract": PartTextMethod.EXTRACTION,
}
DESCRIBE_INSTRUCTION = (
    "Describe this image for someone who cannot see it: what it shows, any text in it (quoted "
    "exactly), numbers, and anything unusual. Answer with the description only."
)


class PartConversionFailed(ModelStepFailed):
    """A part could not be turned into text: the run ends, saying which part and why."""


class PartsBlocked(Exception):
    """An input guardrail blocked text turned out of a part the run brings: `finish` ends it."""

    def __init__(self, finish: Finish):
        super().__init__(finish.reason)
        self.finish = finish


@dataclass
class _Wanted:
    part: dict
    method: str
    brings: bool


def _wanted(run: Run, snapshot: AgentSnapshot, messages: list[Message]) -> dict[str, _Wanted]:
    """The parts to be sent as text, by attachment id (the run's own first, as input_check decides
    what a run brings: its messages, and for a conversation's first run the client's turns)."""
    first_run = all(message.run_id in (None, run.pk) for message in messages)
    wanted: dict[str, _Wanted] = {}
    for message in messages:
        for part in message.parts or ():
            how = conversion_for(snapshot, part["type"])
            if how is None:
                continue
            brings = message.run_id == run.pk or (message.run_id is None and first_run)
            known = wanted.get(part["attachment"])
            wanted[part["attachment"]] = _Wanted(part, METHODS[how], brings or bool(known and known.brings))
    return wanted


def parts_converted(
    *, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message], iteration: int
) -> dict[str, dict] | None:
    """The text of each part of `messages` the step sends as text, by attachment id ({"method",
    "text"}, as engine.context.build_context takes them), made now where it is not yet.
    PartsBlocked when an input rule blocks one the run brings; PartConversionFailed when one
    cannot be made."""
    if snapshot_conversions(snapshot) is None or not any(message.parts for message in messages):
        return None
    wanted = _wanted(run, snapshot, messages)
    if not wanted:
        return None
    stored = {
        (str(row.attachment_id), row.method): row.text
        for row in PartText.objects.filter(attachment_id__in=list(wanted)).only("attachment_id", "method", "text")
    }
    texts: dict[str, ConvertedText] = {}
    for attachment_id, item in wanted.items():
        text = stored.get((attachment_id, item.method))
        new = text is None
        if new:
            text = _convert(run=run, owner=owner, snapshot=snapshot, iteration=iteration, item=item)
        texts[attachment_id] = ConvertedText(text, item.brings, new)
    shown, finish = converted_check(run=run, owner=owner, snapshot=snapshot, iteration=iteration, texts=texts)
    if finish is not None:
        raise PartsBlocked(finish)
    return {key: {"method": wanted[key].method, "text": text} for key, text in shown.items()}


def _failed(part: dict, why: str) -> PartConversionFailed:
    return PartConversionFailed(
        _("The %(kind)s “%(name)s” could not be turned into text: %(why)s")
        % {"kind": part["type"], "name": part["name"], "why": why}
    )


def _convert(*, run: Run, owner: str, snapshot: AgentSnapshot, iteration: int, item: _Wanted) -> str:
    """The part's text, made and recorded now."""
    part = item.part
    try:
        attachment = Attachment.objects.get(pk=part["attachment"])
        data = attachment_read(attachment=attachment)
    except (Attachment.DoesNotExist, AttachmentMissing):
        raise _failed(part, _("its stored bytes are gone.")) from None
    conversions = snapshot_conversions(snapshot)
    if item.method == PartTextMethod.TRANSCRIPTION:
        model = conversions.get("transcription_model")
        if model is None:
            raise _failed(part, _("the agent names no transcription model."))
        custom = CustomCall(
            body=lambda model: transcription_body(model, file_ref=ref(part), name=part["name"]),
            send=lambda *, model, api_key, body, timeout_cap: transcription_send(
                model=model,
                api_key=api_key,
                body=body,
                data=data,
                media_type=part["media_type"],
                timeout_cap=timeout_cap,
            ),
            cost=lambda model, response: transcription_cost(model, part.get("duration_ms")),
        )
        request = ModelRequest(messages=[], models=[model], custom=custom)
        return _by_model(run, owner, snapshot, iteration, item, LLMCall.Purpose.TRANSCRIPTION, request)
    if item.method == PartTextMethod.DESCRIPTION:
        model = conversions.get("description_model")
        if model is None:
            raise _failed(part, _("the agent names no description model."))
        content = [{"type": "text", "text": DESCRIBE_INSTRUCTION}, part]
        request = ModelRequest(messages=[{"role": "user", "content": content}], models=[model], plain_text=True)
        return _by_model(run, owner, snapshot, iteration, item, LLMCall.Purpose.DESCRIPTION, request)
    return _read_locally(run=run, owner=owner, item=item, data=data)


def _by_model(
    run: Run, owner: str, snapshot: AgentSnapshot, iteration: int, item: _Wanted, purpose: str, request: ModelRequest
) -> str:
    started = time.monotonic()
    try:
        answer = model_call(
            run=run, owner=owner, snapshot=snapshot, purpose=purpose, iteration=iteration, request=request
        )
    except ModelStepFailed as exc:
        raise _failed(item.part, str(exc)) from exc
    text = answer.response.content.strip()
    batch = answer_writes(answer)
    _text_writes(batch, run=run, item=item, text=text, llm_call_id=answer.call.pk, started=started)
    answer_record(answer, batch)
    return text


def _read_locally(*, run: Run, owner: str, item: _Wanted, data: bytes) -> str:
    """OCR or extraction, in knowledge's limited child (off the worker's loop while it waits)."""
    part = item.part
    started = time.monotonic()
    try:
        _title, sections = green.offload(
            sections_from_bytes_limited, data, filename=part["name"], content_type=part["media_type"]
        )
    except ExtractionFailed as exc:
        raise _failed(part, str(exc)) from exc
    text = "\n\n".join(section_text(section) for section in sections).strip()
    batch = Batch()
    run_guard(batch, run_id=run.pk, lease_owner=owner, event=True)
    _text_writes(batch, run=run, item=item, text=text, llm_call_id=None, started=started)
    if batch.execute() is None:
        raise LeaseLost(str(run.pk))
    return text


def _text_writes(batch: Batch, *, run: Run, item: _Wanted, text: str, llm_call_id: int | None, started: float) -> None:
    part = item.part
    duration_ms = int((time.monotonic() - started) * 1000)
    row = PartText(
        attachment_id=part["attachment"],
        method=item.method,
        text=text,
        run_id=run.pk,
        llm_call_id=llm_call_id,
        duration_ms=duration_ms,
    )
    # Made by another run meanwhile: that text stands, this one is still what this step sends.
    row_insert(batch, "part_text", row, conflict=("attachment", "method"))
    payload = events.part_converted(
        attachment_id=part["attachment"],
        kind=part["type"],
        name=part["name"],
        method=item.method,
        chars=len(text),
        llm_call_id=llm_call_id,
        duration_ms=duration_ms,
    )
    event_add(batch, run_id=run.pk, type=EventType.PART_CONVERTED, payload=payload)
