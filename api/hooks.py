"""/api/v1/hooks/{hook_id}/: another system's signed request starts a run of the hook's agent.

No API token: the signature with the hook's own secret is the authentication, so an unknown
hook, a disabled one and one whose agent is inactive are the same 404. Each step refuses with a
4xx that names what to fix; docs/hooks.md has the signing recipe."""

import time
from typing import NoReturn

from django.conf import settings
from django.http import Http404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from api.common import ErrorSerializer
from api.throttles import HookFailureThrottle, HookThrottle
from engine.admission import AgentOutsideWorkspace
from platform_site.api_errors import ApiConflict, RequestTooLarge
from platform_site.json_input import JSONInputError, json_loads_checked
from triggers.hooks import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    HookDeliveryReplayed,
    HookPayloadRefused,
    HookSecretUnreadable,
    hook_deliver,
    hook_delivery_id_clean,
    hook_end_user,
    hook_message,
    hook_usable,
    hook_verify,
)


class HookUnauthorized(exceptions.APIException):
    # Not DRF's AuthenticationFailed: with no authentication class, DRF would turn that into a 403.
    status_code = status.HTTP_401_UNAUTHORIZED
    default_code = "hook_signature"


class HookSecretUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = gettext_lazy(
        "This hook's secret cannot be read with the server's encryption keys, so no request to it can be "
        "checked. Its owner must rotate the secret in the admin."
    )
    default_code = "hook_secret_unreadable"


class HookAcceptedSerializer(serializers.Serializer):
    run = serializers.UUIDField(help_text="The run the delivery started.")
    delivery = serializers.CharField(help_text="The delivery id, as sent in X-Agentry-Delivery.")


def _replayed(run_id) -> dict:
    if run_id is None:  # its run was deleted since
        return {"detail": _("This delivery id was already received.")}
    message = _("This delivery id was already received; it started run %(run)s.") % {"run": run_id}
    return {"detail": message, "run": str(run_id)}


def _header(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, str, OpenApiParameter.HEADER, required=True, description=description)


class HookView(APIView):
    authentication_classes = []
    permission_classes = [AllowAny]
    # Counted in post(): a signed delivery against the hook's budget, a refused request against
    # its sender's address, so nobody without the secret can spend the hook's budget.
    throttle_classes = []

    @extend_schema(
        tags=["hooks"],
        operation_id="hooks_deliver",
        summary="Start a run from a signed request",
        description="The JSON object in the body becomes the run's message through the hook's template. "
        "Signed with the hook's secret: X-Agentry-Signature is `sha256=` and the hex HMAC-SHA256 of "
        "`<X-Agentry-Timestamp>.<raw body>`. One run per delivery id; a repeated id is a 409 naming the run "
        "it started. 401 names what is wrong with the signature; 404 for an unknown or disabled hook.",
        parameters=[
            _header(TIMESTAMP_HEADER, "The signing time, in whole seconds since the Unix epoch."),
            _header(SIGNATURE_HEADER, "`sha256=<hex>`: HMAC-SHA256 of `<timestamp>.<raw body>`."),
            _header(DELIVERY_HEADER, "Your id of this delivery (at most 200 printable characters)."),
        ],
        request={"application/json": OpenApiTypes.OBJECT},
        responses={
            202: HookAcceptedSerializer,
            400: ErrorSerializer,
            401: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
            429: ErrorSerializer,
            503: ErrorSerializer,
        },
    )
    def post(self, request, hook_id):
        try:
            hook = hook_usable(hook_id=hook_id)
        except HookSecretUnreadable:
            self._refuse(request, HookSecretUnavailable())
        if hook is None:
            self._refuse(request, Http404())
        # The raw bytes, before any parsing: they are what was signed.
        body = request.body
        if len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            self._refuse(request, RequestTooLarge.over_limit())
        refusal = hook_verify(hook=hook, headers=request.headers, body=body, now=time.time())
        if refusal is not None:
            self._refuse(request, HookUnauthorized({"detail": refusal.message, "reason": refusal.reason}))
        self._throttle(request, HookThrottle())
        try:
            payload = json_loads_checked(body)
        except JSONInputError as exc:
            raise exceptions.ParseError(str(exc)) from None
        if not isinstance(payload, dict):
            raise exceptions.ParseError(_("The body must be a JSON object."))
        try:
            delivery_id = hook_delivery_id_clean(request.headers.get(DELIVERY_HEADER))
            content, end_user = hook_message(hook=hook, payload=payload), hook_end_user(hook=hook, payload=payload)
        except HookPayloadRefused as exc:
            raise exceptions.ParseError(str(exc)) from None
        # Verified above: "sha256=" and the hex digest the hook's secret gives.
        signature = request.headers[SIGNATURE_HEADER].removeprefix("sha256=")
        # The agent's limits per end user are admission's: a refusal is the error layer's 429.
        try:
            run = hook_deliver(
                hook=hook, delivery_id=delivery_id, signature=signature, content=content, end_user=end_user
            )
        except HookDeliveryReplayed as exc:
            raise ApiConflict(_replayed(exc.delivery.run_id)) from None
        except AgentOutsideWorkspace:
            raise Http404 from None  # as for a missing hook: nothing of the other workspace is said
        return Response({"run": str(run.pk), "delivery": delivery_id}, status=status.HTTP_202_ACCEPTED)

    def _throttle(self, request, throttle) -> None:
        if not throttle.allow_request(request, self):
            self.throttled(request, throttle.wait())

    def _refuse(self, request, error: Exception) -> NoReturn:
        """Raises `error`, or a 429 once the sender's address is over its budget of refusals."""
        self._throttle(request, HookFailureThrottle())
        raise error
