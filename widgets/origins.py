"""A widget's allowed origins: the sites whose pages may call its API from a browser (CORS)."""

import re

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

# What a browser sends in Origin: a scheme, a host and a port only when it is not the default.
_ORIGIN = re.compile(r"https?://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?")


def origins_parse(text: str) -> list[str]:
    """The origins of the field's text, one a line, lowercased as browsers send them."""
    return [line.strip().lower().rstrip("/") for line in text.splitlines() if line.strip()]


def origins_validate(text: str) -> None:
    bad = [origin for origin in origins_parse(text) if not _ORIGIN.fullmatch(origin)]
    if bad:
        raise ValidationError(
            _("Not an origin (scheme://host[:port], no path): %(origins)s") % {"origins": ", ".join(bad)}
        )


def origin_allowed(*, allowed_origins: str, origin: str) -> bool:
    return origin.lower() in origins_parse(allowed_origins)
