"""Pieces shared by the API's resource modules."""

from rest_framework import exceptions, serializers, status

from tools.arguments import contains_nul


class ErrorSerializer(serializers.Serializer):
    """The one error shape of the API."""

    message = serializers.CharField()
    extra = serializers.DictField()


class IdempotencyKeyMismatch(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "This Idempotency-Key was already used with different content."
    default_code = "idempotency_key_mismatch"


def reject_nul(value) -> None:
    """PostgreSQL cannot store U+0000 in text or JSON; say so instead of failing on insert."""
    if contains_nul(value):
        raise serializers.ValidationError("Must not contain the NUL character (U+0000).")
