"""An image an API client names by URL (/v1's `image_url` with an http(s) URL), fetched through
the outbound guard (platform_site.outbound): public addresses only unless the host is in
AGENTRY_ATTACHMENT_URL_ALLOWLIST, no more than an attachment's size limit, and by a deadline
that all the URLs of one request share. Fetched in the web request that names it, never on a
worker: the worker only reads stored bytes."""

import time
from urllib.parse import unquote, urlsplit

import httpx
from django.conf import settings
from django.utils.translation import gettext as _

from attachments.sniff import AttachmentRefused
from platform_site import outbound


def fetch_deadline() -> float:
    """The moment by which all the URLs of one request must have been fetched (time.monotonic)."""
    return time.monotonic() + settings.AGENTRY_ATTACHMENT_FETCH_SECONDS


def _name_of(url: str) -> str:
    """The last segment of the URL's path without its extension: a URL's extension often says
    another type than the server sends (a CDN answering WebP for .jpg), and the type is read from
    the bytes anyway (attachments.sniff refuses a name whose extension disagrees)."""
    segment = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    stem, dot, _ = segment.rpartition(".")
    return stem if dot and stem else segment.lstrip(".")


def attachment_url_fetch(url: str, *, deadline: float) -> tuple[bytes, str]:
    """The bytes at `url` and the name its path ends with, or AttachmentRefused: "address" (the
    guard refused where it leads), "size" (longer than an attachment may be), "url" (no answer
    in time, an error status, or no connection). The refusal names the URL as given, never
    what its name resolved to. The name returned has no extension (_name_of)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise AttachmentRefused("url", _("The image URLs of this request took too long to fetch."))
    limit = settings.AGENTRY_ATTACHMENT_MAX_BYTES
    try:
        fetched = outbound.guarded_request(
            "GET", url, timeout_seconds=left, max_bytes=limit, allowlist=outbound.ATTACHMENT_URLS
        )
    except outbound.OutboundBlocked as exc:
        raise AttachmentRefused("address", exc.message) from None
    except httpx.TimeoutException:
        raise AttachmentRefused(
            "url", _("%(url)s did not answer within %(seconds)s s.") % {"url": url[:200], "seconds": f"{left:.0f}"}
        ) from None
    except httpx.HTTPError as exc:
        raise AttachmentRefused(
            "url", _("%(url)s could not be fetched (%(error)s).") % {"url": url[:200], "error": type(exc).__name__}
        ) from None
    status = fetched.response.status_code
    if not 200 <= status < 300:
        raise AttachmentRefused("url", _("%(url)s answered HTTP %(status)s.") % {"url": url[:200], "status": status})
    if fetched.truncated:
        raise AttachmentRefused(
            "size", _("%(url)s is larger than %(limit)s bytes.") % {"url": url[:200], "limit": limit}
        )
    return fetched.body, _name_of(str(fetched.response.url))
