"""Absolute addresses of this site's pages, for what is handed to another system (a widget's
embed snippet, a hook's URL, a link in a chat message): another site resolves a bare path
against itself, so every such address names this site.

The base is AGENTRY_PUBLIC_URL when set; otherwise the origin the operator's request came in on,
which is only a guess: `public_url_doubt` says when it is not one to hand out."""

from django.conf import settings
from django.http.request import split_domain_port
from django.utils.translation import gettext as _

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}


def public_url(path: str, *, request=None) -> str:
    """`path` on AGENTRY_PUBLIC_URL, or on the request's origin; with neither, `path` alone."""
    base = settings.AGENTRY_PUBLIC_URL
    if not base and request is not None:
        base = f"{request.scheme}://{request.get_host()}"
    return base.rstrip("/") + path


def public_url_doubt(request) -> str:
    """Why the addresses public_url makes for this request may not reach other systems, or ""
    when they will: AGENTRY_PUBLIC_URL is set, or the request's host is a real name this site
    is configured to answer to."""
    if settings.AGENTRY_PUBLIC_URL:
        return ""
    host, _port = split_domain_port(request.get_host())
    if host in _LOCAL_HOSTS:
        return _(
            "AGENTRY_PUBLIC_URL is not set and this page was opened at %(host)s, so the addresses below only work "
            "on this machine. Set AGENTRY_PUBLIC_URL to the address other sites reach Agentry at."
        ) % {"host": host}
    if "*" in settings.ALLOWED_HOSTS:
        return _(
            "AGENTRY_PUBLIC_URL is not set and ALLOWED_HOSTS takes any host, so the addresses below use whatever "
            "host this request named. Set AGENTRY_PUBLIC_URL to the address other sites reach Agentry at."
        )
    return ""
