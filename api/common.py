"""Pieces shared by the API's resource modules."""

import copy

from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, pagination, serializers, status

from agents.models import Agent
from agents.selectors import agent_usable_by
from platform_site.json_input import JSONInputError, json_loads_checked
from tools.arguments import contains_nul


class ErrorSerializer(serializers.Serializer):
    """The one error shape of the API."""

    message = serializers.CharField()
    extra = serializers.DictField()


class IdempotencyKeyMismatch(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = _("This Idempotency-Key was already used with different content.")
    default_code = "idempotency_key_mismatch"


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


def _shallow(field: serializers.Field) -> serializers.Field:
    """What copy.copy(field) makes, without its protocol: copy.copy asks for __reduce_ex__ and
    rebuilds through copyreg, about 6 µs a field, 136 µs for the run serializer's 21 plain fields;
    this is 31 µs. Equal to copy.copy for classes with no slots and no copy or pickle hooks of
    their own, which tests/unit/api/test_fields_built_once.py checks for every class built once."""
    copied = object.__new__(type(field))
    copied.__dict__.update(field.__dict__)
    return copied


def _holds_fields(field: serializers.Field) -> bool:
    """Whether binding the field binds other fields too: a nested serializer, a list's or a
    dict's child, a many-relation's child relation."""
    return isinstance(field, serializers.BaseSerializer) or any(
        isinstance(value, serializers.Field) for value in vars(field).values()
    )


class FieldsBuiltOnce:
    """A serializer whose fields are worked out once per class, then copied for each instance.

    DRF introspects the model for every ModelSerializer instance and deep-copies every declared
    field (re-running each field's constructor): for the run a posted message answers with, that
    was most of the time spent writing the answer. Binding a field to its serializer only sets
    attributes on it, so each instance gets shallow copies (_shallow); a field holding other
    fields (a nested serializer, a list's child) binds those too, and is deep-copied as DRF does.
    Only for serializers whose fields never depend on the request or the instance (no get_fields
    override, no context read while building them).
    """

    def get_fields(self):
        built = type(self).__dict__.get("_fields_built")
        if built is None:
            built = [(name, field, _holds_fields(field)) for name, field in super().get_fields().items()]
            type(self)._fields_built = built
        return {name: copy.deepcopy(field) if nested else _shallow(field) for name, field, nested in built}


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
