"""What every chat service module provides (chatbots.services): pure functions over a request's
bytes and headers and the channel's secrets, so each service's documented verification is tested
against recorded requests without a server. The inbound view (chatbots.views), the runs and the
replies are the app's; a module only speaks its service's protocol."""

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Inbound:
    """A callback as the view received it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    body: bytes


@dataclass(frozen=True)
class Answer:
    """What to answer the service's callback with, at once (within its deadline)."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"


@dataclass(frozen=True)
class ChatMessage:
    """A user's message to the bot: `event_id` the service's own id (it retries: deduplicated by
    it), `user_id` the chat user (mapped to an end user), `thread_id` the group thread or direct
    chat (a conversation), `text` and the files it carries as (name, bytes-fetcher key) pairs."""

    event_id: str
    user_id: str
    thread_id: str
    text: str
    files: list[dict] = field(default_factory=list)
    # Whatever the reply needs later (a message id to reply under, a response URL, a chat id).
    reply_to: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ButtonPress:
    """An approval card's button pressed: which approval, the decision, by which chat user."""

    event_id: str
    user_id: str
    approval_id: str
    decision: str  # "approve" | "reject"
    request_hash: str
    reply_to: dict = field(default_factory=dict)


class Refused(Exception):
    """The callback is not the service's (bad signature, stale timestamp, wrong token): answered
    with `answer` and nothing else happens."""

    def __init__(self, answer: Answer, reason: str):
        super().__init__(reason)
        self.answer = answer
        self.reason = reason


class ChatService(Protocol):
    """One chat service's protocol. `secrets` are the channel's (decrypted) credentials by name,
    as `secret_names` lists them."""

    name: str
    secret_names: tuple[str, ...]
    # Optional, not declared here: `handshake_by_get = True` when the service verifies its callback
    # URL with a GET (the view lets a GET reach `handshake` only then); `token_request(secrets,
    # api_base)` and `token_from_answer(json) -> (token, seconds)` when its API wants an access token
    # (chatbots.replies fetches and caches it, and passes it as secrets["access_token"]).
    # `posted_from_answer(answer, message) -> dict | None` (what identifies the message a reply_request's
    # answer says was posted) and `update_request(posted, text, secrets, api_base) -> dict` (the
    # request replacing that message's text) when the service lets a bot edit its message: the
    # answer is then posted as the model streams it and edited as text arrives.

    def verify(self, inbound: Inbound, secrets: dict[str, str]) -> None:
        """Raise Refused unless the request is the service's own and fresh (replays are caught by
        event id afterwards)."""
        ...

    def handshake(self, inbound: Inbound, secrets: dict[str, str]) -> Answer | None:
        """The answer to a URL verification / challenge request, if this is one; else None."""
        ...

    def parse(self, inbound: Inbound, secrets: dict[str, str]) -> ChatMessage | ButtonPress | None:
        """The message or button press the (verified) request carries; None for events ignored."""
        ...

    def ack(self, event: ChatMessage | ButtonPress | None) -> Answer:
        """The immediate answer to a verified callback (the run goes on in the background)."""
        ...

    def reply_request(self, message: ChatMessage, text: str, secrets: dict[str, str], api_base: str) -> dict:
        """The HTTP request posting `text` back in the message's thread: {"method", "url", "headers",
        "json" | "data"}, sent by the app through the outbound guard. `api_base` is the service's
        API host (overridable so tests point it at a local server checking the request)."""
        ...

    def approval_card_request(
        self, message: ChatMessage, approval: dict, secrets: dict[str, str], api_base: str
    ) -> dict:
        """The HTTP request posting an approval card with approve/reject buttons whose callback
        carries the approval id and its request hash."""
        ...
