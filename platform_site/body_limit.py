"""Request body limits, enforced by the web server's application while the body arrives.

A body used to be read whole (spooled to a temporary file past the upload memory limit) before
Django looked at the request, so an anonymous client could make the server write gigabytes to
its temporary directory before the 401. Here a request declaring a Content-Length above its
limit is refused before a byte of the body is read, and a chunked one is counted as it arrives
and refused once it passes the limit: at most the limit is ever held. The 413 is sent in the
shape the URL's clients read, with `Connection: close` so that what the client still sends is
never read. Nothing here needs the database: it is decided before authentication.

A body must also be complete within AGENTRY_BODY_TIMEOUT_SECONDS (408 after): a client that
trickles a byte now and then would otherwise hold its connection and its buffered body for ever.
(uvicorn itself waits for ever for a request's headers: put a proxy with a header timeout in
front of a web exposed to the internet.)

Three limits (platform_site/settings.py): AGENTRY_MAX_BODY_BYTES for every request,
AGENTRY_MAX_UPLOAD_BODY_BYTES for the knowledge admin's forms, which upload documents, and
AGENTRY_MAX_ATTACHMENT_BODY_BYTES for the attachment uploads (the API's, the widget's and the try
page's) and the ways in that carry attachments in a message's body (REST multipart messages,
/v1's data: URLs).
"""

import asyncio
import re

from django.conf import settings
from django.http import HttpRequest
from django.http.cookie import parse_cookie
from django.utils import translation
from django.utils.translation import gettext as _

from platform_site.error_responses import error_json

# The knowledge admin's forms (a document's, a base's with its upload): a file may be as large
# as a document may be (AGENTRY_KNOWLEDGE_MAX_FILE_BYTES).
UPLOAD_PATHS = re.compile(r"^/admin/knowledge/[a-z]+/(add|[^/]+/[a-z_]+)/$")
# The API's attachment upload: one file as large as an attachment may be (AGENTRY_ATTACHMENT_MAX_BYTES),
# for any caller (it is refused after the body for a bad token, as every API write is).
# The widget's (an end-user token, checked after the body too) and the try page's (a session's,
# like the knowledge admin's forms) take one file each as well.
ATTACHMENT_UPLOAD_PATHS = re.compile(r"^/api/v1/(attachments|widget/[0-9a-f-]{36}/attachments)/$")
TRY_UPLOAD_PATH = "/monitor/try/attachments/"
# The ways in that take a message's attachments in its body: a REST message as multipart form
# data, a chat completion's data: URLs and base64. Each takes as much as the upload does (larger
# files go by reference: uploaded first, then named).
ATTACHMENT_BODY_PATHS = re.compile(r"^/api/v1/conversations/[^/]+/messages/$|^/v1/chat/completions$")


class BodyTooLarge(Exception):
    """The body passed its limit while it was being read."""

    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


class BodyTooSlow(Exception):
    """The body was not complete within AGENTRY_BODY_TIMEOUT_SECONDS of the request's start."""


def _path(scope) -> str:
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return value.decode("latin1")
    return None


def body_limit(scope) -> int:
    """The largest body the request may carry. The upload limit is for a signed-in operator's
    form: a request without a session cookie cannot be one, and keeps the general limit."""
    path = _path(scope)
    if ATTACHMENT_UPLOAD_PATHS.match(path) or ATTACHMENT_BODY_PATHS.match(path):
        return max(settings.AGENTRY_MAX_ATTACHMENT_BODY_BYTES, settings.AGENTRY_MAX_BODY_BYTES)
    if UPLOAD_PATHS.match(path) or path == TRY_UPLOAD_PATH:
        cookies = parse_cookie(_header(scope, b"cookie") or "")
        if settings.SESSION_COOKIE_NAME in cookies:
            upload = settings.AGENTRY_MAX_UPLOAD_BODY_BYTES
            if path == TRY_UPLOAD_PATH:
                upload = settings.AGENTRY_MAX_ATTACHMENT_BODY_BYTES
            return max(upload, settings.AGENTRY_MAX_BODY_BYTES)
    return settings.AGENTRY_MAX_BODY_BYTES


def declared_over(scope, limit: int) -> bool:
    """Whether the request's Content-Length is above `limit` (uvicorn has already refused one
    that is not a number)."""
    declared = _header(scope, b"content-length")
    return declared is not None and declared.strip().isdigit() and int(declared) > limit


def within(receive, limit: int, seconds: float):
    """`receive`, counting the body's bytes as they arrive: BodyTooLarge once they pass `limit`,
    BodyTooSlow if the body is not complete `seconds` after this call. Once the body is complete
    `receive` is passed through untimed: a stream's view waits on it for the client to leave."""
    received, complete = 0, False
    deadline = asyncio.get_running_loop().time() + seconds

    async def receive_within_limit():
        nonlocal received, complete
        if complete:
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), deadline - asyncio.get_running_loop().time())
        except TimeoutError:
            raise BodyTooSlow() from None
        if message["type"] == "http.request":
            received += len(message.get("body") or b"")
            if received > limit:
                raise BodyTooLarge(limit)
            complete = not message.get("more_body")
        return message

    return receive_within_limit


def _request(scope) -> HttpRequest:
    """Enough of a request for the language it asks for (cookie, then Accept-Language) and for
    the error shape of its URL."""
    request = HttpRequest()
    request.path = request.path_info = _path(scope)
    request.COOKIES = parse_cookie(_header(scope, b"cookie") or "")
    request.META["HTTP_ACCEPT_LANGUAGE"] = _header(scope, b"accept-language") or ""
    return request


async def refuse(scope, send, limit: int) -> None:
    """Answer 413, in the request's language and the shape its URL's clients read."""
    request = _request(scope)
    with translation.override(translation.get_language_from_request(request)):
        message = _("The request body is larger than %(count)s bytes.") % {"count": limit}
        response = error_json(request, 413, message, code="request_too_large", extra={"limit": limit})
    await _send_closing(send, response)


async def refuse_slow(scope, send, seconds: float) -> None:
    """Answer 408 to a body still incomplete at its deadline."""
    request = _request(scope)
    with translation.override(translation.get_language_from_request(request)):
        message = _("The request body was not sent within %(seconds)s seconds.") % {"seconds": f"{seconds:g}"}
        response = error_json(request, 408, message, code="request_timeout", extra={"seconds": seconds})
    await _send_closing(send, response)


async def _send_closing(send, response) -> None:
    headers = [(name.lower().encode("latin1"), value.encode("latin1")) for name, value in response.items()]
    headers += [(b"content-length", str(len(response.content)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})
