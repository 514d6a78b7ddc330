"""Bytes a client sends inline: a data: URL (`data:[<media type>][;base64],<data>`) or bare
base64 (/v1's `input_audio`). Pure: decoded here, judged by attachments.sniff when stored.

The media type a data: URL declares is the client's word, not ours: the type is read from the
bytes. A declaration of the same family (image/jpeg declared, a PNG sent: a client that labels
every picture JPEG) is corrected to what the bytes are; one of another family (image/png declared,
a PDF sent) is refused (`declared_check`), as the name's extension is (attachments.sniff)."""

import base64
import binascii
import re
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.utils.translation import gettext as _

from attachments.sniff import AttachmentRefused

_SPACE = re.compile(r"\s+")
# Families whose members a client may mix up; in others (application/…) only the very type fits.
_FAMILIES = ("image/", "audio/", "text/")
_UNDECLARED = {"", "application/octet-stream"}


def _too_large(decoded_size: int) -> None:
    limit = settings.AGENTRY_ATTACHMENT_MAX_BYTES
    if decoded_size > limit:
        raise AttachmentRefused(
            "size",
            _("The file has about %(size)s bytes; at most %(limit)s are accepted.")
            % {"size": decoded_size, "limit": limit},
        )


def base64_decode(text: str) -> bytes:
    """Standard base64 (line breaks and spaces ignored), or AttachmentRefused("base64"). The size
    is checked from the text's length before anything is decoded."""
    if not isinstance(text, str):
        raise AttachmentRefused("base64", _("Must be a base64 string."))
    text = _SPACE.sub("", text)
    _too_large(len(text) * 3 // 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise AttachmentRefused("base64", _("This is not valid base64.")) from None


def data_url_decode(url: str) -> tuple[str, bytes]:
    """The media type a data: URL declares (lower case, "" when none) and its bytes, or
    AttachmentRefused("data_url") for one that is not a data: URL, or ("base64") for bad base64."""
    if not isinstance(url, str) or not url[:5].lower() == "data:":
        raise AttachmentRefused("data_url", _("Must be a data: URL."))
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise AttachmentRefused("data_url", _("A data: URL needs a comma before its data."))
    params = [param.strip().lower() for param in header.split(";")]
    media_type = params[0]
    if "base64" in params[1:]:
        return media_type, base64_decode(payload)
    _too_large(len(payload))
    return media_type, unquote_to_bytes(payload)


def declared_check(declared: str, media_type: str) -> None:
    """Refused (AttachmentRefused("mismatch")) when the client declared a type of another family
    than the bytes are (see the module's docstring); nothing declared always fits."""
    declared = declared.split(";", 1)[0].strip().lower()
    if declared in _UNDECLARED or declared == media_type:
        return
    if any(declared.startswith(family) and media_type.startswith(family) for family in _FAMILIES):
        return
    raise AttachmentRefused(
        "mismatch",
        _("It was declared %(declared)s but it is %(media_type)s; send it with the right type.")
        % {"declared": declared[:100], "media_type": media_type},
    )
