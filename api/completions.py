"""OpenAI chat completions on top of runs: the request's messages become a conversation, its
last user message starts a run through the real queue, and the run's answer is the reply.

The agent's own system prompt, model settings and tools apply and sampling parameters are
ignored, because the operator configures them. The request's system and developer messages are
kept, never dropped: joined into one system message, the first of the conversation, so the model
reads it right after the agent's system prompt (which keeps the operator's rules first).

The agent's input guardrails check every turn of the request, not only the last user message:
its system and developer text and the assistant turns the client made up reach the model only as
the rules let them (engine.guardrails). A block answers finish_reason "content_filter".

A user message may carry OpenAI content parts besides text: `image_url` (a data: URL, or an
http(s) URL fetched through the outbound guard, attachments.fetch), `input_audio` (base64 and its
format) and `file` (a data: URL in `file_data`, with its `filename`; a `file_id` names OpenAI's
own file store, which Agentry does not keep). Parsing them is pure (completion_request_parse);
storing them (attachments.services.attachment_store, as the token's user and the request's end
user) is completion_start's, before the run: the last user message's parts become its
attachments, the earlier ones' go with the history. The worker only ever reads stored bytes.

`response_format` holds this request's answer to a JSON Schema (`json_schema`) or to any JSON
object (`json_object`), as an agent's output schema would (docs/quality.md): the answer is
checked on the platform's side and sent back to the model to be fixed, and the reply's content is
the JSON text. A run whose answer never matched answers an error (code schema_invalid).

OpenAI's `user` field (the application's id for its end user) becomes the conversation's end
user: the agent's limits per end user and its long-term memory go by it. Its `metadata` (string
pairs, bounded as OpenAI bounds them) goes on the run and the conversation: the runs list
filters by it.
"""

import json
from dataclasses import dataclass, field

from django.conf import settings
from django.utils.translation import gettext as _

from agents.models import Agent
from agents.output_schema import OutputSchemaInvalid, output_schema_check
from agents.selectors import agent_usable_by
from attachments.data_urls import base64_decode, data_url_decode, declared_check
from attachments.fetch import attachment_url_fetch, fetch_deadline
from attachments.limits import per_message_check
from attachments.models import Attachment
from attachments.parts import parts_of
from attachments.services import attachment_store
from attachments.sniff import AttachmentRefused
from conversations.end_users import EndUserInvalid, end_user_clean
from conversations.models import Approval, Message, Run, RunStatus, RunTrigger, StopReason
from conversations.run_labels import LabelsInvalid, metadata_clean
from conversations.selectors import run_with_final_answer
from engine.admission import conversation_start

MAX_MESSAGES = 500
SYSTEM_ROLES = {"system", "developer"}
# How a completed run's stop reason reads as OpenAI's finish_reason; any other is "stop". A
# guardrail's block is the provider's content filter to a client (its text says why).
FINISH_REASONS = {
    StopReason.MAX_ITERATIONS: "length",
    StopReason.TRUNCATED: "length",
    StopReason.GUARDRAIL_BLOCKED: "content_filter",
}

PARKED_TEXT = (
    "This request is waiting for approval: before it can go on, a person must approve the call of "
    "{tools}. Run {run_id} continues after the decision; follow it at /api/v1/runs/{run_id}/."
)


SCHEMA_INVALID_TEXT = (
    "Run {run_id} ended without an answer matching the requested schema, also after its repair turns "
    "(stop reason schema_invalid). {error}"
)


class CompletionRequestError(Exception):
    def __init__(self, message: str, *, param: str | None = None, status: int = 400, code: str = "invalid_request"):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code


@dataclass
class PartIn:
    """A content part as the request gave it, decoded but not yet judged: its bytes (or the URL
    to fetch them from), the name to store it under, the type the client declared for it, and
    the kind its part type promises ("" for a `file`, which may be any)."""

    param: str
    data: bytes | None = None
    url: str = ""
    name: str = ""
    declared: str = ""
    kind: str = ""


@dataclass
class CompletionRequest:
    model: str
    system: str
    history: list[dict]
    content: str
    stream: bool
    include_usage: bool
    end_user: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    # The last user message's parts; the history's are in each turn's "parts_in".
    parts_in: list[PartIn] = field(default_factory=list)
    # The schema the answer must match (response_format), over the agent's; None: the agent's.
    output_schema: dict | None = None


# response_format json_object: any JSON object is an answer.
ANY_OBJECT = {"type": "object"}


def _response_format(value) -> dict | None:
    """The schema a response_format asks the answer to match (None: text, the agent's own)."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("text", "json_object", "json_schema"):
        raise CompletionRequestError(
            _('Must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": {…}}.'),
            param="response_format",
        )
    if value["type"] == "text":
        return None
    if value["type"] == "json_object":
        return ANY_OBJECT
    described = value.get("json_schema")
    if not isinstance(described, dict) or "schema" not in described:
        raise CompletionRequestError(
            _('Required: {"name": …, "schema": {a JSON Schema}}.'), param="response_format.json_schema"
        )
    try:
        output_schema_check(described["schema"])
    except OutputSchemaInvalid as exc:
        raise CompletionRequestError(str(exc), param="response_format.json_schema.schema") from None
    return described["schema"]


ATTACHMENT_PART_TYPES = ("image_url", "input_audio", "file")
AUDIO_FORMAT_CHARS = 10


def _refused(exc: AttachmentRefused, param: str) -> CompletionRequestError:
    return CompletionRequestError(
        str(exc), param=param, status=413 if exc.code == "size" else 400, code=f"attachment_{exc.code}"
    )


def _image_part(part: dict, param: str) -> PartIn:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise CompletionRequestError(_("Required: image_url.url, a data: URL or an http(s) URL."), param=param)
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("http", "https"):
        return PartIn(param=param, url=url, kind="image")
    if scheme != "data":
        raise CompletionRequestError(_("image_url.url must be a data: URL or an http(s) URL."), param=param)
    declared, data = data_url_decode(url)
    if declared and not declared.startswith("image/"):
        raise AttachmentRefused(
            "mismatch", _("An image_url's data: URL must declare an image, not %(type)s.") % {"type": declared[:100]}
        )
    return PartIn(param=param, data=data, declared=declared, kind="image")


def _audio_part(part: dict, param: str) -> PartIn:
    audio = part.get("input_audio")
    if not isinstance(audio, dict):
        raise CompletionRequestError(_("Required: input_audio, an object with data and format."), param=param)
    audio_format = audio.get("format")
    if not isinstance(audio_format, str) or not audio_format.isalnum() or len(audio_format) > AUDIO_FORMAT_CHARS:
        raise CompletionRequestError(
            _("input_audio.format must name the audio's format, e.g. wav or mp3."), param=param
        )
    # The format is the name's extension: attachments.sniff refuses one the bytes do not bear out.
    data = base64_decode(audio.get("data"))
    return PartIn(param=param, data=data, name=f"audio.{audio_format.lower()}", kind="audio")


def _file_part(part: dict, param: str) -> PartIn:
    file = part.get("file")
    if not isinstance(file, dict):
        raise CompletionRequestError(_("Required: file, an object with file_data and filename."), param=param)
    if file.get("file_id") is not None:
        raise CompletionRequestError(
            _(
                "file_id is not supported: Agentry keeps no OpenAI file store. Send the file itself in file_data "
                "(a data: URL), or upload it to /api/v1/attachments/ and post to the REST API."
            ),
            param=param,
            code="file_id_unsupported",
        )
    name = file.get("filename", "")
    if not isinstance(name, str):
        raise CompletionRequestError(_("file.filename must be a string."), param=param)
    declared, data = data_url_decode(file.get("file_data"))
    return PartIn(param=param, data=data, name=name, declared=declared)


_PART_READERS = {"image_url": _image_part, "input_audio": _audio_part, "file": _file_part}


def _content(content, param: str, *, role: str) -> tuple[str, list[PartIn]]:
    """A message's text and its attachment parts (only a user message may have any). The count
    is checked before a part is decoded."""
    if not isinstance(content, list) or all(isinstance(part, dict) and part.get("type") == "text" for part in content):
        return _text(content, param), []
    texts, parts = [], []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise CompletionRequestError(_("Must be a content part, an object with a type."), param=f"{param}[{index}]")
        if part["type"] not in ("text", *ATTACHMENT_PART_TYPES):
            raise CompletionRequestError(
                _("Unknown content part type %(type)r: send text, image_url, input_audio or file.")
                % {"type": part["type"][:50]},
                param=f"{param}[{index}].type",
            )
    if role != "user":
        raise CompletionRequestError(
            _("Only user messages may carry images, audio and files; this one may hold text parts only."), param=param
        )
    try:
        per_message_check(sum(part["type"] != "text" for part in content))
    except AttachmentRefused as exc:
        raise _refused(exc, param) from None
    for index, part in enumerate(content):
        if part["type"] == "text":
            texts.append(part)
            continue
        part_param = f"{param}[{index}]"
        try:
            parts.append(_PART_READERS[part["type"]](part, part_param))
        except AttachmentRefused as exc:
            raise _refused(exc, part_param) from None
    return _text(texts, param), parts


def _text(content, param: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str) for part in content
    ):
        text = "\n".join(part["text"] for part in content)
    else:
        raise CompletionRequestError(_("Must be a string or a list of content parts."), param=param)
    if "\x00" in text:
        raise CompletionRequestError(_("Must not contain the NUL character (U+0000)."), param=param)
    if len(text) > settings.AGENTRY_MESSAGE_MAX_CHARS:
        raise CompletionRequestError(
            _("Must be at most %(count)s characters.") % {"count": settings.AGENTRY_MESSAGE_MAX_CHARS}, param=param
        )
    return text


def completion_request_parse(body) -> CompletionRequest:
    if not isinstance(body, dict):
        raise CompletionRequestError(_("The request body must be a JSON object."))
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise CompletionRequestError(_("Required: the slug of an agent."), param="model")
    if "\x00" in model:
        raise CompletionRequestError(_("Must not contain the NUL character (U+0000)."), param="model")
    if body.get("tools") or body.get("functions"):
        raise CompletionRequestError(_("Not supported: the agent runs its own tools."), param="tools")
    if body.get("n", 1) != 1:
        raise CompletionRequestError(_("Only n=1 is supported."), param="n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise CompletionRequestError(_("Must be true or false."), param="stream")
    end_user = body.get("user", "")
    if not isinstance(end_user, str):
        raise CompletionRequestError(_("Must be a string: your id for the end user."), param="user")
    try:
        end_user = end_user_clean(end_user)
    except EndUserInvalid as exc:
        raise CompletionRequestError(str(exc), param="user") from None
    try:
        metadata = metadata_clean(body.get("metadata"))
    except LabelsInvalid as exc:
        raise CompletionRequestError(exc.message, param="metadata") from None
    output_schema = _response_format(body.get("response_format"))
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise CompletionRequestError(_("Must be an object."), param="stream_options")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise CompletionRequestError(_("Required: a non-empty list of messages."), param="messages")
    if len(messages) > MAX_MESSAGES:
        raise CompletionRequestError(_("At most %(count)s messages.") % {"count": MAX_MESSAGES}, param="messages")
    turns, system = [], []
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            raise CompletionRequestError(_("Must be an object with a role and content."), param=param)
        role = message.get("role")
        if not isinstance(role, str):
            raise CompletionRequestError(
                "Must be a string: user, assistant, system or developer.", param=f"{param}.role"
            )
        if role in SYSTEM_ROLES:
            if message.get("tool_calls") or message.get("function_call"):
                raise CompletionRequestError(
                    _("Tool calls are not accepted: the agent calls its own tools."), param=param
                )
            system.append(_content(message.get("content"), f"{param}.content", role=role)[0])
            continue
        if role not in ("user", "assistant"):
            raise CompletionRequestError(
                f"Role {role!r} is not accepted: send user and assistant messages; the agent calls its own tools.",
                param=f"{param}.role",
            )
        if message.get("tool_calls") or message.get("function_call"):
            raise CompletionRequestError(_("Tool calls are not accepted: the agent calls its own tools."), param=param)
        text, parts = _content(message.get("content"), f"{param}.content", role=role)
        turns.append({"role": role, "content": text, **({"parts_in": parts} if parts else {})})
    if not turns or turns[-1]["role"] != "user" or not (turns[-1]["content"].strip() or turns[-1].get("parts_in")):
        raise CompletionRequestError(
            _("The last message must be a user message with text or attachments."), param="messages"
        )
    system_text = "\n\n".join(text for text in system if text.strip())
    if len(system_text) > settings.AGENTRY_MESSAGE_MAX_CHARS:
        raise CompletionRequestError(
            f"The system and developer messages together must be at most {settings.AGENTRY_MESSAGE_MAX_CHARS} "
            "characters.",
            param="messages",
        )
    return CompletionRequest(
        model=model,
        system=system_text,
        history=turns[:-1],
        content=turns[-1]["content"],
        parts_in=turns[-1].get("parts_in", []),
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        end_user=end_user,
        metadata=metadata,
        output_schema=output_schema,
    )


def completion_agent(*, user, slug: str) -> Agent:
    agent = agent_usable_by(user=user, slug=slug)
    if agent is None:
        raise CompletionRequestError(
            f"The model {slug!r} does not exist or you do not have access to it.",
            param="model",
            status=404,
            code="model_not_found",
        )
    return agent


def _stored(*, user, agent: Agent, end_user: str, parts: list[PartIn], deadline: float) -> list[Attachment]:
    """The parts stored as attachments of the request's identity, in order: fetched first if
    named by URL, then sniffed (attachment_store), then held to what the part promised."""
    attachments = []
    for part in parts:
        try:
            data, name = (part.data, part.name) if part.url == "" else attachment_url_fetch(part.url, deadline=deadline)
            attachment = attachment_store(
                workspace=agent.workspace, uploaded_by=user, owner=user, end_user=end_user, data=data, name=name
            )
            if part.kind and attachment.kind != part.kind:
                raise AttachmentRefused(
                    "mismatch",
                    _("This part must be %(kind)s; it is %(media_type)s.")
                    % {"kind": part.kind, "media_type": attachment.media_type},
                )
            declared_check(part.declared, attachment.media_type)
        except AttachmentRefused as exc:
            # What was stored before the refusal is used by no message: the daily sweep deletes it.
            raise _refused(exc, part.param) from None
        attachments.append(attachment)
    return attachments


def completion_start(*, user, agent: Agent, request: CompletionRequest) -> Run:
    """Every request is a new conversation: the client's history (its system text first) and
    its last user message, and the run that answers it. Their parts are stored first (_stored):
    a text-only request does nothing more than before."""
    opening = [{"role": Message.Role.SYSTEM, "content": request.system}] if request.system else []
    history, earlier, attachments = request.history, [], []
    if request.parts_in or any("parts_in" in turn for turn in history):
        deadline = fetch_deadline()
        stored = {"user": user, "agent": agent, "end_user": request.end_user, "deadline": deadline}
        history = []
        for turn in request.history:
            turn = dict(turn)
            if parts_in := turn.pop("parts_in", None):
                turn_attachments = _stored(parts=parts_in, **stored)
                turn["parts"] = parts_of(turn_attachments)
                earlier.extend(turn_attachments)
            history.append(turn)
        attachments = _stored(parts=request.parts_in, **stored)
    title = request.content[:80] or ", ".join(a.name or a.kind for a in attachments)[:80]
    try:
        return conversation_start(
            agent=agent,
            user=user,
            content=request.content,
            title=title,
            metadata={**request.metadata, "source": "chat.completions"},
            history=opening + history,
            end_user=request.end_user,
            trigger=RunTrigger.OPENAI,
            run_metadata=request.metadata,
            attachments=attachments,
            history_attachments=earlier,
            output_schema=request.output_schema,
        )
    except AttachmentRefused as exc:
        # Admission's refusal of a part the agent's models cannot be sent.
        raise _refused(exc, "messages") from None


@dataclass
class CompletionOutcome:
    run: Run
    text: str | None
    final_llm_call_id: int | None
    finish_reason: str
    error: str | None


def completion_outcome(*, run_id, settled_only: bool = False) -> CompletionOutcome | None:
    """What to answer once the run has ended or parked (or, past the wait, where it stands).
    With `settled_only`, None while the run is still queued or running: a waiting request reads
    the run and, once it has settled, its answer in one call."""
    run, final = run_with_final_answer(run_id=run_id)
    if settled_only and not (run.is_terminal or run.status == RunStatus.AWAITING_APPROVAL):
        return None
    if run.status == RunStatus.AWAITING_APPROVAL:
        tools = Approval.objects.filter(run=run, status=Approval.Status.PENDING).values_list(
            "invocation__tool_name", flat=True
        )
        text = PARKED_TEXT.format(tools=", ".join(sorted(set(tools))) or "a tool", run_id=run.pk)
        return CompletionOutcome(run, text, None, "stop", None)
    if run.status == RunStatus.COMPLETED and run.stop_reason == StopReason.SCHEMA_INVALID:
        # The client asked for JSON in a schema: the words that say why there is none are no answer.
        return CompletionOutcome(run, None, None, "stop", SCHEMA_INVALID_TEXT.format(run_id=run.pk, error=run.error))
    if run.status == RunStatus.COMPLETED:
        finish = FINISH_REASONS.get(run.stop_reason, "stop")
        if final is None:
            return CompletionOutcome(run, "", None, finish, None)
        if run.output_parsed is not None:
            # The JSON text of the answer that matched, without the code fence a model may add.
            text = json.dumps(run.output_parsed, ensure_ascii=False)
            return CompletionOutcome(run, text, final.llm_call_id, finish, None)
        return CompletionOutcome(run, final.content, final.llm_call_id, finish, None)
    if run.is_terminal:
        detail = "an internal error" if run.stop_reason == StopReason.INTERNAL_ERROR else (run.error or run.stop_reason)
        return CompletionOutcome(run, None, None, "stop", f"Run {run.pk} ended {run.status}: {detail}")
    return CompletionOutcome(
        run,
        None,
        None,
        "stop",
        f"Run {run.pk} is still {run.status} after {settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS:.0f} s; "
        f"follow it at /api/v1/runs/{run.pk}/.",
    )


def completion_usage(run: Run) -> dict:
    return {
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "total_tokens": run.total_tokens,
        "prompt_tokens_details": {"cached_tokens": run.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": run.reasoning_tokens},
    }
