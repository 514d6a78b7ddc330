"""Local servers the tool tests call: a petstore HTTP API and a streamable-HTTP MCP server.

Both listen on 127.0.0.1 on a free port, in a thread of the test process, and record what
they received so a test can check what a tool (or a worker) really sent.
"""

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from fakellm.testing import serve_app_in_thread


def serve(app, *, lifespan: str = "off") -> tuple[str, callable]:
    return serve_app_in_thread(app, lifespan=lifespan)


class PetstoreServer:
    """The petstore-expanded API (tests/fixtures), plus pages for fetch and guard tests."""

    def __init__(self):
        self.requests: list[dict] = []
        self.pets = {1: {"id": 1, "name": "Rex", "tag": "dog"}, 2: {"id": 2, "name": "Tom", "tag": "cat"}}
        self.base_url, self.stop = serve(
            Starlette(
                routes=[
                    Route("/pets", self.pets_endpoint, methods=["GET", "POST"]),
                    Route("/pets/{id:int}", self.pet_endpoint, methods=["GET", "DELETE"]),
                    Route("/many", self.many),
                    Route("/page", self.page),
                    Route("/redirect", self.redirect),
                    Route("/loop", self.loop),
                    Route("/echo-headers", self.echo_headers),
                    Route("/image", self.image),
                ]
            )
        )

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]

    async def _record(self, request: Request) -> None:
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "query": dict(request.query_params),
                "headers": dict(request.headers),
                "body": (await request.body()).decode(),
            }
        )

    async def pets_endpoint(self, request: Request):
        await self._record(request)
        if request.method == "POST":
            pet = await request.json()
            pet["id"] = max(self.pets) + 1
            self.pets[pet["id"]] = pet
            return JSONResponse(pet, status_code=201)
        pets = list(self.pets.values())
        tags = request.query_params.getlist("tags")
        if tags:
            pets = [p for p in pets if p.get("tag") in tags]
        limit = int(request.query_params.get("limit", 100))
        return JSONResponse(pets[:limit])

    async def pet_endpoint(self, request: Request):
        await self._record(request)
        pet_id = request.path_params["id"]
        if pet_id not in self.pets:
            return JSONResponse({"code": 404, "message": f"pet {pet_id} not found"}, status_code=404)
        if request.method == "DELETE":
            del self.pets[pet_id]
            return Response(status_code=204)
        return JSONResponse(self.pets[pet_id])

    async def many(self, request: Request):
        await self._record(request)
        rows = [{"id": i, "name": f"pet number {i}"} for i in range(int(request.query_params.get("n", 50)))]
        return JSONResponse({"total": len(rows), "data": {"items": rows}})

    async def page(self, request: Request):
        await self._record(request)
        words = " ".join(f"word{i}" for i in range(int(request.query_params.get("words", 10))))
        return HTMLResponse(
            "<html><head><title>Agentry test page</title><style>body{color:red}</style></head>"
            f"<body><script>var secret = 1;</script><h1>Hello</h1><p>First paragraph.</p><p>{words}</p></body></html>"
        )

    async def redirect(self, request: Request):
        await self._record(request)
        return RedirectResponse(request.query_params["to"], status_code=302)

    async def loop(self, request: Request):
        await self._record(request)
        return RedirectResponse("/loop", status_code=302)

    async def echo_headers(self, request: Request):
        await self._record(request)
        return JSONResponse({k: v for k, v in request.headers.items() if k.startswith("x-")})

    async def image(self, request: Request):
        await self._record(request)
        return Response(b"\x89PNG\r\n", media_type="image/png")


def notes_mcp_server() -> MCPServer:
    """A small MCP server with one read-only and one destructive tool, annotated."""
    server = MCPServer("notes")
    notes: list[str] = []

    @server.tool(
        name="add_note",
        description="Stores a note.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    def add_note(text: str) -> dict:
        notes.append(text)
        return {"saved": text, "count": len(notes)}

    @server.tool(
        name="list_notes", description="Lists the stored notes.", annotations=ToolAnnotations(read_only_hint=True)
    )
    def list_notes() -> str:
        return "\n".join(notes) or "(no notes)"

    @server.tool(name="fail", description="Always fails.")
    def fail() -> str:
        raise ToolError("the notebook is locked")

    return server


class MCPHTTPServer:
    def __init__(self):
        self.server = notes_mcp_server()
        base_url, self.stop = serve(self.server.streamable_http_app(host="127.0.0.1"), lifespan="on")
        self.url = f"{base_url}/mcp"


@pytest.fixture(scope="session")
def petstore():
    server = PetstoreServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def notes_mcp():
    server = MCPHTTPServer()
    yield server
    server.stop()
