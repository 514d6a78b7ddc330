"""How the operator pages print amounts, ids and times.

A DecimalField read back from the database keeps its scale, so a zero cost is Decimal("0E-8")
and str() prints exactly that; amounts are printed in plain notation here instead. Ids are
long (UUIDs): pages show their first characters and keep the whole id in a tooltip. Times are
printed in the site's time zone (TIME_ZONE) with the zone named, to the second, as the admin
prints them (console/formats).
"""

from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.utils import dateformat, timezone
from django.utils.html import format_html

# Django's date format: 2026-12-07 13:30:05 CST. The admin's DATETIME_FORMAT is the same.
LOCAL_TIME_FORMAT = "Y-m-d H:i:s T"

SHORT_ID_CHARS = 8


def plain_amount(value) -> str:
    """A decimal amount in plain notation without trailing zeros: 0, 0.00042, 12.5."""
    if value is None or value == "":
        return "–"
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    if not amount.is_finite():
        return str(amount)
    text = format(amount, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def local_time(value) -> str:
    """A moment (a datetime, or the ISO text of the pages' JSON data) in the site's time zone,
    the zone named: 2026-12-07 13:30:05 CST; "–" for none."""
    if value is None or value == "":
        return "–"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return dateformat.format(timezone.localtime(moment), LOCAL_TIME_FORMAT)


def fixed_amount(value) -> str:
    """The exact amount at its stored scale, in plain notation (for JSON): 0.00000000, not 0E-8."""
    return format(Decimal(str(value)), "f")


def short_id(value) -> str:
    return str(value)[:SHORT_ID_CHARS]


def short_id_html(value) -> str:
    """The id's first characters, with the whole id as the tooltip (and for copy: see title)."""
    full = str(value)
    return format_html('<span class="short-id" title="{}">{}</span>', full, short_id(full))
