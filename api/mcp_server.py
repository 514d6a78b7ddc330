"""/mcp/: the agents a token may use, as the tools of an MCP server (Streamable HTTP).

Built on the official SDK's low-level server, mounted by the web application
(platform_site.asgi) beside Django: every request is authenticated with the API token it
bears (`Authorization: Bearer …`, as the REST API; 401 with WWW-Authenticate without one) and
served statelessly, so any web process may answer any request and nothing is kept between
them. The token decides everything: the tools listed are the agents its user may use in its
workspace that have "reachable over MCP" set (api.mcp_calls).

A tool call is a run through the real queue (trigger "mcp"); the request only waits for it,
on the event loop, its queries on the default thread pool (platform_site.asyncdb). While the
run waits for a person's approval the call sends progress notifications (to a client that
asked for them with a progressToken), and also every keepalive interval, so a client that
resets its timeout on progress keeps waiting. The call ends with the run's answer, or after
AGENTRY_MCP_CALL_WAIT_SECONDS with where the run stands ("waiting for approval, run …") and
the conversation id to continue with.
"""

import asyncio
import contextlib
import io

import mcp_types as types
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import JsonResponse
from django.utils import translation
from django.utils.translation import gettext as _
from mcp import MCPError
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from api.async_auth import AsyncApiError, throttle_check, token_user
from api.mcp_calls import (
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    CallRefused,
    CallState,
    UnknownTool,
    mcp_agents,
    mcp_call_start,
    mcp_call_state,
)
from api.throttles import ApiUserThrottle
from conversations.wakeups import get_waker
from platform_site.asyncdb import db

PATHS = ("/mcp", "/mcp/")
# Where the request's caller waits in the ASGI scope for the handlers (ctx.request.scope).
CALLER = "agentry.mcp_caller"


def _authenticated(request):
    """The token's user, counted by the API's rate (AsyncApiError: the 401 or the 429)."""
    user = token_user(request)
    throttle_check(request, user, [ApiUserThrottle])
    return user


def _caller(ctx) -> tuple:
    return ctx.request.scope[CALLER]


async def _list_tools(ctx, params) -> types.ListToolsResult:
    _request, user = _caller(ctx)
    listed = await db(mcp_agents, user=user)
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=tool.name,
                title=tool.title,
                description=tool.description,
                input_schema=INPUT_SCHEMA,
                output_schema=OUTPUT_SCHEMA,
            )
            for tool in listed
        ]
    )


def _progress_text(state: CallState) -> str:
    if state.waiting_on:
        return _("Waiting for approval of %(tools)s; run %(run)s.") % {
            "tools": ", ".join(state.waiting_on),
            "run": state.run_id,
        }
    return _("Run %(run)s is %(status)s.") % {"run": state.run_id, "status": state.status}


async def _outcome(ctx, state: CallState) -> CallState:
    """The run's state once it has ended, or when the wait runs out; progress meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.AGENTRY_MCP_CALL_WAIT_SECONDS
    reported = 0
    async with get_waker().watch(state.run_id, settles_only=True) as wake:
        while True:
            wake.clear()
            state = await db(mcp_call_state, run_id=state.run_id)
            if state.terminal or loop.time() >= deadline:
                return state
            if state.waiting_on or reported:
                # Also on every timed poll: a client resetting its timeout on progress waits on.
                reported += 1
                await ctx.session.report_progress(reported, None, _progress_text(state))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await wake.wait()


def _result(state: CallState) -> types.CallToolResult:
    structured = {
        "status": state.status,
        "run_id": str(state.run_id),
        "conversation_id": str(state.conversation_id),
        "answer": state.answer,
        "output_parsed": state.output_parsed,
    }
    if state.answer is not None:
        text, error = state.answer, False
    elif state.terminal:
        text = _("Run %(run)s ended %(status)s: %(detail)s") % {
            "run": state.run_id,
            "status": state.status,
            "detail": state.detail,
        }
        error = True
    elif state.waiting_on:
        text = _(
            "Waiting for approval, run %(run)s: a person must approve the call of %(tools)s. The run continues "
            "after the decision; its answer will be in conversation %(conversation)s (GET /api/v1/runs/%(run)s/)."
        ) % {"run": state.run_id, "tools": ", ".join(state.waiting_on), "conversation": state.conversation_id}
        error = False
    else:
        text = _("Run %(run)s is still %(status)s after %(seconds)s s; follow it at /api/v1/runs/%(run)s/.") % {
            "run": state.run_id,
            "status": state.status,
            "seconds": f"{settings.AGENTRY_MCP_CALL_WAIT_SECONDS:.0f}",
        }
        error = False
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured, is_error=error)


def _refused(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


async def _call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    request, user = _caller(ctx)
    try:
        state = await db(mcp_call_start, request=request, user=user, name=params.name, arguments=params.arguments)
    except UnknownTool as exc:
        raise MCPError(types.INVALID_PARAMS, str(exc)) from None
    except CallRefused as exc:
        return _refused(str(exc))
    return _result(await _outcome(ctx, state))


server = Server(
    "agentry",
    title="Agentry",
    instructions="Each tool is an Agentry agent: call it with a message; continue with the conversation_id it returns.",
    on_list_tools=_list_tools,
    on_call_tool=_call_tool,
)


async def mcp_application(scope, receive, send) -> None:
    """The ASGI application of /mcp/: the token first, then the SDK's transport, one request at a
    time (stateless: a session manager per request costs a task group, and no process holds a
    session another would need)."""
    request = ASGIRequest(scope, io.BytesIO())
    language = translation.get_language_from_request(request)
    with translation.override(language):
        try:
            user = await db(_authenticated, request)
        except AsyncApiError as exc:
            response = exc.response()
            return await _send_django(response, send)
        scope[CALLER] = (request, user)
        # The SDK's own limit is the site's (platform_site.body_limit counts the body first).
        manager = StreamableHTTPSessionManager(
            app=server, stateless=True, max_request_body_size=settings.AGENTRY_MAX_BODY_BYTES
        )
        async with manager.run():
            await manager.handle_request(scope, receive, send)


async def _send_django(response: JsonResponse, send) -> None:
    headers = [(name.encode("latin1"), value.encode("latin1")) for name, value in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})
