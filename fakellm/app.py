"""Starlette application: the two LLM endpoints plus test control endpoints."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fakellm.embeddings import embeddings_response
from fakellm.engine import ANTHROPIC, OPENAI, handle
from fakellm.state import Hold, ServerState
from fakellm.step_validation import HOLD_LABEL, HOLD_LABEL_RULE
from fakellm.transcriptions import transcriptions
from fakellm.validation import ScriptError


def _state(request: Request) -> ServerState:
    return request.app.state.fakellm


def _problem(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def chat_completions(request: Request) -> Response:
    with _state(request).answering():
        return await handle(request, OPENAI)


async def messages(request: Request) -> Response:
    with _state(request).answering():
        return await handle(request, ANTHROPIC)


async def embeddings(request: Request) -> Response:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return _problem("body is not valid JSON")
    if not isinstance(body, dict):
        return _problem("body must be a JSON object")
    state = _state(request)
    with state.answering():
        state.requests.append(body)
        status, data = embeddings_response(body)
        return JSONResponse(data, status_code=status)


async def list_models(request: Request) -> Response:
    data = [
        {"id": name, "object": "model", "created": 0, "owned_by": "fakellm"} for name in sorted(_state(request).scripts)
    ]
    return JSONResponse({"object": "list", "data": data})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "scripts": len(_state(request).scripts)})


async def list_scripts(request: Request) -> Response:
    return JSONResponse(sorted(_state(request).scripts))


async def put_script(request: Request) -> Response:
    name = request.path_params["name"]
    try:
        document = json.loads(await request.body())
    except ValueError:
        return _problem("body is not valid JSON")
    try:
        _state(request).install(name, document)
    except ScriptError as exc:
        return _problem(str(exc))
    return JSONResponse({"status": "ok", "name": name})


async def get_requests(request: Request) -> Response:
    try:
        limit = int(request.query_params.get("limit", "50"))
    except ValueError:
        return _problem("limit must be an integer")
    model = request.query_params.get("model")
    return JSONResponse(_state(request).recent_requests(model, limit))


async def clear_requests(request: Request) -> Response:
    _state(request).clear_log()
    return JSONResponse({"status": "ok"})


async def get_stats(request: Request) -> Response:
    state = _state(request)
    return JSONResponse({"in_flight": state.in_flight, "max_in_flight": state.max_in_flight})


def _hold(request: Request) -> Hold | None:
    label = request.path_params["label"]
    return _state(request).hold(label) if HOLD_LABEL.match(label) else None


async def get_hold(request: Request) -> Response:
    hold = _hold(request)
    return JSONResponse(hold.state()) if hold else _problem(HOLD_LABEL_RULE)


async def release_hold(request: Request) -> Response:
    hold = _hold(request)
    if hold is None:
        return _problem(HOLD_LABEL_RULE)
    hold.release()
    return JSONResponse(hold.state())


def create_app(scripts: dict[str, dict]) -> Starlette:
    """Build the server for the given scripts (name -> script document)."""
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/_health", health, methods=["GET"]),
            Route("/_scripts", list_scripts, methods=["GET"]),
            Route("/_scripts/{name}", put_script, methods=["PUT"]),
            Route("/_requests", get_requests, methods=["GET"]),
            Route("/_requests", clear_requests, methods=["DELETE"]),
            Route("/_stats", get_stats, methods=["GET"]),
            Route("/_holds/{label}", get_hold, methods=["GET"]),
            Route("/_holds/{label}/release", release_hold, methods=["POST"]),
        ]
    )
    app.state.fakellm = ServerState(scripts)
    return app
