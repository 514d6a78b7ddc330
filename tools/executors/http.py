"""HTTP tools: an endpoint described in the admin, called through the guarded HTTP seam.

Path placeholders, query parameters and the JSON body are filled from the validated
arguments; write tools send the call's idempotency key so the service can recognise a
retry of the same call.

Arguments come from a model, so they may not change where the call goes: a path value is one
path segment (no '/', '\\', '.' or '..', also not percent-encoded), the built URL must stay
under the path the operator configured, and no header value may carry a line break.
"""

import json
import posixpath
import re
from urllib.parse import quote, unquote, urlsplit

import httpx

from platform_site import outbound
from tools.executors.live import live_tool
from tools.models import URL_PLACEHOLDER, secret_mapping
from tools.registry import ToolContext, ToolError

_BODYLESS = {"GET", "DELETE"}
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Servers and proxies differ in how many times they decode a path; this many layers is more than any does.
_DECODE_LAYERS = 4
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _origin(url: str) -> tuple:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())


def load(spec: dict, live: dict | None = None) -> dict[str, str]:
    """The tool's secret headers, from its live row, provided it is still switched on.

    Secrets are read live while the URL comes from the run's snapshot, so a key is sent only
    while the live row still points at the snapshot's origin: after an operator moves a tool
    to another host (and perhaps gives it that host's key), runs pinned to the old URL cannot
    carry the new key there. So the row is read here even when the caller read `live` already."""
    row = live_tool(spec, "http_url", "http_secret_headers")
    secrets = secret_mapping(row["http_secret_headers"] or "")
    if secrets and _origin(row["http_url"]) != _origin(spec["http"]["url"]):
        raise ToolError(
            "an operator moved it to another address after this run started, so its credentials "
            "cannot be used here; answer without it.",
            detail=f"snapshot origin {_origin(spec['http']['url'])} differs from the live one "
            f"{_origin(row['http_url'])}: secret headers not sent",
        )
    return secrets


def _query_value(value):
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value


def _path_segment(name: str, value) -> str:
    """The argument as one encoded path segment, or ToolError if it would change the path's shape."""
    text = decoded = str(value)
    for _ in range(_DECODE_LAYERS):
        if decoded in ("", ".", "..") or "/" in decoded or "\\" in decoded or _CONTROL.search(decoded):
            raise ToolError(
                f"the argument {name!r} is part of the URL path and cannot be {text[:100]!r}: send the "
                "value itself, without '/', '\\', '.' or '..' (also not percent-encoded), and not empty."
            )
        if unquote(decoded) == decoded:
            return quote(text, safe="")
        decoded = unquote(decoded)
    raise ToolError(f"the argument {name!r} is encoded too many times to be used in the URL path.")


def _base_path(template_path: str) -> str:
    """The fixed part of the configured path that every call stays under (up to the last '/'
    before the first placeholder), or the whole path when it has none."""
    if "{" not in template_path:
        return template_path
    return template_path[: template_path.index("{")].rsplit("/", 1)[0] + "/"


def _stays_under(template: str, url: str) -> bool:
    built, configured = urlsplit(url), urlsplit(template)
    if _origin(url) != _origin(template):
        return False
    if "{" not in configured.path:
        return built.path == configured.path
    path = built.path
    for _ in range(_DECODE_LAYERS):
        path = unquote(path)
    # The path as a server that decodes it and resolves dot segments would see it.
    resolved = posixpath.normpath(path.replace("\\", "/")) + ("/" if path.endswith("/") else "")
    base = posixpath.normpath(unquote(_base_path(configured.path))).rstrip("/") + "/"
    return resolved.startswith(base) and resolved != base


def build_request(http: dict, arguments: dict) -> dict:
    """Method, URL, query and body of one call; arguments are used once each."""
    rest = dict(arguments)
    template = http["url"]
    path_part, mark, query_part = template.partition("?")

    def fill_path(match):
        return _path_segment(match.group(1), rest.pop(match.group(1)))

    def fill_query(match):
        return quote(str(rest.pop(match.group(1))), safe="")

    url = URL_PLACEHOLDER.sub(fill_path, path_part) + mark + URL_PLACEHOLDER.sub(fill_query, query_part)
    if not _stays_under(template, url):
        raise ToolError(
            "the arguments would send the call outside the service's configured path; "
            "send plain values for the path arguments."
        )
    params = {name: _query_value(rest.pop(name)) for name in http["query_params"] if name in rest}
    body = None
    if http["body_argument"]:
        body = rest.pop(http["body_argument"], None)
    if http["method"] in _BODYLESS:
        params.update({name: _query_value(value) for name, value in rest.items()})
    elif rest and body is None:
        body = rest
    return {"method": http["method"], "url": url, "params": params or None, "json": body}


def _check_headers(headers: dict) -> None:
    # The idempotency key holds the model's tool call id; a line break there would add a header.
    for name, value in headers.items():
        if _CONTROL.search(str(value)):
            raise ToolError(
                f"the value of the {name} header would contain a line break or control character; "
                "the call was not sent."
            )


def _pointer(value, pointer: str):
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        elif isinstance(value, dict) and token in value:
            value = value[token]
        else:
            raise ToolError(f"the response has nothing at {pointer} (missing {token!r}).")
    return value


def run(*, spec: dict, arguments: dict, ctx: ToolContext, loaded: dict[str, str]):
    http = spec["http"]
    request = build_request(http, arguments)
    headers = {"Accept": "application/json", **http["headers"], **loaded}
    if spec["side_effect"] == "write":
        headers["Idempotency-Key"] = ctx.idempotency_key
    _check_headers(headers)
    try:
        fetched = outbound.guarded_request(
            request["method"],
            request["url"],
            headers=headers,
            params=request["params"],
            json=request["json"],
            timeout_seconds=spec["timeout_seconds"],
            max_bytes=http["max_response_bytes"],
            secret_headers=tuple(loaded),
        )
    except outbound.OutboundBlocked as exc:
        raise ToolError(exc.message, detail=exc.detail)
    except httpx.TimeoutException:
        raise ToolError(f"the service did not answer within {spec['timeout_seconds']} s.")
    except httpx.HTTPError as exc:
        raise ToolError(f"the service could not be reached ({type(exc).__name__}: {exc}).")
    response = fetched.response
    text = fetched.text()
    if response.status_code >= 400:
        raise ToolError(f"the service answered HTTP {response.status_code} {response.reason_phrase}: {text[:500]}")
    if not text.strip():
        return f"HTTP {response.status_code} {response.reason_phrase} (no content)."
    if "json" not in response.headers.get("content-type", ""):
        return text + (f"\n… [cut at {http['max_response_bytes']} bytes]" if fetched.truncated else "")
    if fetched.truncated:
        raise ToolError(
            f"the response is larger than this tool's limit of {http['max_response_bytes']} bytes; "
            "narrow the request (filters, a smaller page)."
        )
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return _pointer(value, http["response_pointer"]) if http["response_pointer"] else value
