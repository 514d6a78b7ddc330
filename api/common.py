"""Pieces shared by the API's resource modules."""

from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, serializers, status

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
