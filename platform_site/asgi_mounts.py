"""ASGI applications served beside Django at a path or under a path prefix (an SDK's protocol
server: A2A's routes, the MCP server), each
registered by the app that owns it from its AppConfig.ready(). platform_site.asgi hands them a
request whose path starts with the prefix, after the body limit and before Django: Django's
middleware does not run for them, so such an application authenticates, throttles and answers
errors itself."""

_mounts: dict[str, object] = {}
_paths: dict[str, object] = {}


def asgi_mount_register(prefix: str, app) -> None:
    """Serve the paths under `prefix` (starting and ending with "/") with the ASGI `app`."""
    if not (prefix.startswith("/") and prefix.endswith("/")):
        raise ValueError(f"an ASGI mount's prefix starts and ends with '/': {prefix!r}")
    _mounts[prefix] = app


def asgi_path_register(paths, app) -> None:
    """Serve exactly these paths (no others under them) with the ASGI `app`."""
    for path in paths:
        if not path.startswith("/"):
            raise ValueError(f"an ASGI path starts with '/': {path!r}")
        _paths[path] = app


def asgi_mounted(path: str):
    """The application registered for `path`, or None."""
    if path in _paths:
        return _paths[path]
    for prefix, app in _mounts.items():
        if path.startswith(prefix):
            return app
    return None
