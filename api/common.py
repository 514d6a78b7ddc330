"""Pieces shared by the API's resource modules."""

from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, pagination, serializers, status

from agents.models import Agent
from agents.selectors import agent_usable_by
from platform_site.json_input import JSONInputError, json_loads_checked
from tools.arguments import contains_nul
from workspaces.access import may_start_runs


class ErrorSerializer(serializers.Serializer):
    """The one error shape of the API."""

    message = serializers.CharField()
    extra = serializers.DictField()


class IdempotencyKeyMismatch(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = _("This Idempotency-Key was already used with different content.")
    default_code = "idempotency_key_mismatch"


def runs_start_check(user) -> None:
    """Every way into the API that starts runs (a new conversation, a message, a chat completion)
    asks this, once: a viewer's or approver's token, or one whose scopes leave out runs, is a 403
    (workspaces.access.may_start_runs)."""
    if not may_start_runs(user):
        raise exceptions.PermissionDenied(_("Your token may not start runs in this workspace."))


def agent_named(*, user, slug: str) -> Agent:
    """The agent a request body names by slug, if the user may use it; else the field's 400."""
    agent = agent_usable_by(user=user, slug=slug)
    if agent is None:
        raise serializers.ValidationError(_("There is no agent %(slug)r that you may use.") % {"slug": slug})
    return agent


def reject_nul(value) -> None:
    """PostgreSQL cannot store U+0000 in text or JSON; say so instead of failing on insert."""
    if contains_nul(value):
        raise serializers.ValidationError(_("Must not contain the NUL character (U+0000)."))


class JSONInputField(serializers.JSONField):
    """A JSON field that form data can fill too: DRF then parses the field's text itself, with
    no bound on nesting and letting lone surrogates through, so that text goes through the same
    checks as a JSON body."""

    def to_internal_value(self, data):
        if getattr(data, "is_json_string", False):
            try:
                return json_loads_checked(str(data))
            except JSONInputError as exc:
                raise serializers.ValidationError(str(exc)) from None
        return super().to_internal_value(data)


def _moment(text: str):
    try:
        return parse_datetime(text)
    except ValueError:  # well formed, but no such date
        return None


class NewestFirstCursorPagination(pagination.CursorPagination):
    """Newest first, a page at a time by an opaque cursor (`next` and `previous` links), for
    lists of a ledger that only grows. A page is an index range: it costs the same at the
    ten-millionth row as at the first, where a page number's OFFSET and the count of every row
    grow with the table; and rows created while a client pages do not shift the pages it has
    not read yet. A cursor that is not one of ours is a 400, not a 404."""

    ordering = ("-created_at", "-id")

    def decode_cursor(self, request):
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            cursor = False
        # The position is only base64 to the client: one it made up would reach the query.
        if cursor is False or (cursor and cursor.position is not None and not _moment(cursor.position)):
            raise exceptions.ParseError(_("cursor: not a cursor this list gave; follow the next and previous links."))
        return cursor
