"""Agents over Google's A2A protocol: for each agent with `a2a_exposed`, its agent card at
GET /a2a/<slug>/.well-known/agent-card.json and its JSON-RPC endpoint at POST /a2a/<slug>
(a2a-sdk's dispatcher, A2A 1.0 with 0.3's method names too), served beside Django
(platform_site.asgi_mounts) by a2a_server.handler.

Both ask for an API token (`Authorization: Bearer …`, the card's security scheme) and count
against its rates (ApiUserThrottle; a message, RunStartThrottle too); the agent is one the token
may use (agents.selectors), else a 404, as for any agent of another workspace. These answers,
before the protocol's, are HTTP ones in the API's error shape; a body that is not JSON the
platform takes (too deep, lone surrogates, NUL characters) is the protocol's parse error. docs/a2a.md tells the rest.
"""

import re
from types import SimpleNamespace

import redis
from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import JSONParseError
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes.common import ServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from django.conf import settings
from django.utils.translation import gettext as _
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a_server.cards import CARD_PATH, PATH_PREFIX, agent_card
from a2a_server.handler import CALLER, Caller, RunTaskHandler
from agents.selectors import agent_usable_by
from api.async_auth import AsyncApiError, throttle_check, token_user
from api.throttles import ApiUserThrottle, RunStartThrottle
from platform_site.asyncdb import db
from platform_site.json_input import JSONInputError, json_loads_checked
from tools.arguments import contains_nul

SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,100}$")
SEND_METHODS = frozenset({"SendMessage", "SendStreamingMessage", "message/send", "message/stream"})


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"message": message, "extra": {}}, status_code=status, headers=headers)


def _caller(authorization: str, client: str, slug: str, throttles: list) -> Caller:
    """The token's user and the exposed agent it may use, or the AsyncApiError to answer."""
    request = SimpleNamespace(
        headers={"authorization": authorization}, META={"HTTP_AUTHORIZATION": authorization, "REMOTE_ADDR": client}
    )
    user = token_user(request)
    try:
        throttle_check(request, user, throttles)
    except redis.RedisError:
        raise AsyncApiError(503, _("The rate limiter is unavailable; try again shortly.")) from None
    agent = agent_usable_by(user=user, slug=slug) if SLUG.match(slug) else None
    if agent is None or not agent.a2a_exposed:
        raise AsyncApiError(404, _("There is no agent %(slug)r over A2A that you may use.") % {"slug": slug[:100]})
    return Caller(user=user, agent=agent)


async def _authenticated(request: Request, throttles: list) -> Caller | JSONResponse:
    try:
        return await db(
            _caller,
            request.headers.get("authorization", ""),
            request.client.host if request.client else "",
            request.path_params["slug"],
            throttles,
        )
    except AsyncApiError as exc:
        return _error(exc.status, exc.message, exc.headers)


def _base_url(request: Request) -> str:
    return settings.AGENTRY_PUBLIC_URL or str(request.base_url).rstrip("/")


async def card(request: Request):
    caller = await _authenticated(request, [ApiUserThrottle])
    if isinstance(caller, JSONResponse):
        return caller
    return JSONResponse(agent_card_to_dict(agent_card(agent=caller.agent, base_url=_base_url(request))))


class CallerContext(ServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        return ServerCallContext(state={"headers": dict(request.headers), CALLER: request.state.caller})


dispatcher = JsonRpcDispatcher(
    request_handler=RunTaskHandler(), context_builder=CallerContext(), enable_v0_3_compat=True
)


def _parsed(body: bytes):
    """The body as JSON the platform takes, or the JSONInputError saying why not."""
    try:
        parsed = json_loads_checked(body)
    except JSONInputError as exc:
        return exc
    if contains_nul(parsed):
        return JSONInputError(_("The request must not contain the NUL character (U+0000)."))
    return parsed


async def rpc(request: Request):
    body = _parsed(await request.body())
    # A message starts a run: it counts against the token's rate of run starts too.
    sends = isinstance(body, dict) and isinstance(body.get("method"), str) and body["method"] in SEND_METHODS
    caller = await _authenticated(request, [ApiUserThrottle, RunStartThrottle] if sends else [ApiUserThrottle])
    if isinstance(caller, JSONResponse):
        return caller
    if isinstance(body, JSONInputError):
        return JSONResponse(build_error_response(None, JSONParseError(message=str(body))))
    # The dispatcher reads the body as JSON again: it gets this, checked, parse.
    request._json = body
    request.state.caller = caller
    return await dispatcher.handle_requests(request)


async def _http_error(request: Request, exc: HTTPException):
    return _error(exc.status_code, exc.detail, exc.headers)


app = Starlette(
    routes=[
        Route(f"{PATH_PREFIX}{{slug}}/{CARD_PATH}", card, methods=["GET"]),
        Route(f"{PATH_PREFIX}{{slug}}", rpc, methods=["POST"]),
        Route(f"{PATH_PREFIX}{{slug}}/", rpc, methods=["POST"]),
    ],
    exception_handlers={HTTPException: _http_error},
)
