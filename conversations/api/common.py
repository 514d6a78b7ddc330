"""Pieces shared by the API's resource modules."""

from rest_framework import exceptions, serializers, status


class ErrorSerializer(serializers.Serializer):
    """The one error shape of the API."""

    message = serializers.CharField()
    extra = serializers.DictField()


class IdempotencyKeyMismatch(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "This Idempotency-Key was already used with different content."
    default_code = "idempotency_key_mismatch"


def reject_nul(value, field: str) -> None:
    """PostgreSQL cannot store U+0000 in text or JSON; say so instead of failing on insert."""
    if isinstance(value, str):
        if "\x00" in value:
            raise serializers.ValidationError({field: "Must not contain the NUL character (U+0000)."})
    elif isinstance(value, dict):
        for key, item in value.items():
            reject_nul(key, field)
            reject_nul(item, field)
    elif isinstance(value, list):
        for item in value:
            reject_nul(item, field)
