"""POST /chatbots/<channel id>/: a chat service's callback (its event subscription, its bot's
webhook, its interactivity URL), answered at once within the service's deadline. A GET is only a
URL verification, for a service that verifies its callback URL so (WeCom's signed `echostr`;
`handshake_by_get` on its module): any other GET is refused as that service refuses, and a GET to
another service's channel is a 405.

No session and no CSRF token: the channel's service module checks the request the service's own
way (chatbots.services). The order is the protocol's: a URL verification is answered, then the
request is verified (Refused: its answer, nothing else), parsed, deduplicated by the service's
event id (a retry is acknowledged and does nothing), and a message starts a run in the background
(chatbots.inbound) while the callback is acknowledged; the answer reaches the chat later
(chatbots.replies). A request the module cannot read is a 400; an unknown or disabled channel
a 404."""

import logging

from django.conf import settings
from django.http import HttpResponse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt

from chatbots.inbound import (
    ChannelSecretsUnreadable,
    EventReplayed,
    channel_secrets,
    channel_usable,
    chat_message_receive,
    chat_press_receive,
)
from chatbots.models import ChatEvent
from chatbots.replies import chat_notice_after_commit
from chatbots.services import SERVICES
from chatbots.services.base import Answer, ButtonPress, ChatMessage, Inbound, Refused
from platform_site.error_responses import error_json, method_not_allowed
from platform_site.http_methods import require_http_methods

log = logging.getLogger(__name__)


def _response(answer: Answer) -> HttpResponse:
    return HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)


def _inbound(request) -> Inbound:
    return Inbound(
        method=request.method,
        path=request.path,
        query={key: request.GET.get(key, "") for key in request.GET},
        headers={name.lower(): value for name, value in request.headers.items()},
        body=request.body,
    )


@csrf_exempt
@require_http_methods(["GET", "POST"])
def chat_callback(request, channel_id):
    try:
        channel = channel_usable(channel_id=channel_id)
    except ChannelSecretsUnreadable:
        message = _("This channel's secrets cannot be read with the server's encryption keys; enter them again.")
        return error_json(request, 503, message, code="chat_secrets_unreadable")
    service = SERVICES.get(channel.service) if channel is not None else None
    if service is None:
        return error_json(request, 404, _("Not found."), code="not_found")
    by_get = request.method == "GET"
    if by_get and not getattr(service, "handshake_by_get", False):
        return method_not_allowed(request, {"POST"})
    if len(request.body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return error_json(request, 413, _("The request body is too large."), code="request_too_large")
    inbound, secrets = _inbound(request), channel_secrets(channel)
    try:
        answer = service.handshake(inbound, secrets)
        if answer is not None:
            return _response(answer)
        if by_get:
            return method_not_allowed(request, {"POST"})
        service.verify(inbound, secrets)
        event = service.parse(inbound, secrets)
    except Refused as exc:
        log.info("chat channel %s refused a callback: %s", channel.pk, exc.reason)
        return _response(exc.answer)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeError) as exc:
        return error_json(request, 400, _("The request cannot be read: %(error)s") % {"error": exc}, code="invalid")
    try:
        if isinstance(event, ChatMessage):
            recorded = chat_message_receive(channel=channel, message=event)
        elif isinstance(event, ButtonPress):
            recorded = chat_press_receive(channel=channel, press=event)
        else:
            recorded = None
    except EventReplayed:
        return _response(service.ack(event))
    except ValueError as exc:
        return error_json(request, 400, _("The request cannot be taken: %(error)s") % {"error": exc}, code="invalid")
    if recorded is not None and recorded.detail and recorded.outcome != ChatEvent.Outcome.UNKNOWN_USER:
        chat_notice_after_commit(recorded)
    return _response(service.ack(event))
