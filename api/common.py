"""Pieces shared by the API's resource modules."""

import copy

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


class FieldsBuiltOnce:
    """A ModelSerializer whose fields are worked out from the model once per class, then copied.

    DRF introspects the model for every serializer instance: for the run a posted message
    answers with, that was most of the time spent writing the answer. Only for serializers whose
    fields never depend on the request or the instance (no get_fields override, no context read
    while building them); each instance still gets fields of its own, as DRF's copies are.
    """

    def get_fields(self):
        built = type(self).__dict__.get("_fields_built")
        if built is None:
            built = super().get_fields()
            type(self)._fields_built = built
        return copy.deepcopy(built)
