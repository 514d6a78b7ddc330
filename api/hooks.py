"""/api/v1/hooks/{hook_id}/: another system's signed request starts a run of the hook's agent.

No API token: the signature with the hook's own secret is the authentication, so an unknown
hook, a disabled one and one whose agent is inactive are the same 404. Each step refuses with a
4xx that names what to fix; docs/hooks.md has the signing recipe."""

import time

from django.conf import settings
from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Agent
from api.common import ErrorSerializer
from api.throttles import END_USER_LIMIT_FIELDS, EndUserLimited, HookThrottle, end_user_limits_check
from platform_site.api_errors import ApiConflict, RequestTooLarge
from platform_site.json_input import JSONInputError, json_loads_checked
from triggers.hooks import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    HookDeliveryReplayed,
    HookPayloadRefused,
    hook_deliver,
    hook_delivery_id_clean,
    hook_end_user,
    hook_message,
    hook_verify,
)
from triggers.models import Hook


class HookUnauthorized(exceptions.APIException):
    # Not DRF's AuthenticationFailed: with no authentication class, DRF would turn that into a 403.
    status_code = status.HTTP_401_UNAUTHORIZED
    default_code = "hook_signature"


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
    throttle_classes = [HookThrottle]

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
        },
    )
    def post(self, request, hook_id):
        hook = (
            Hook.objects.select_related("agent", "owner")
            .filter(pk=hook_id, enabled=True, agent__is_active=True)
            .first()
        )
        if hook is None:
            raise Http404
        # The raw bytes, before any parsing: they are what was signed.
        body = request.body
        if len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise RequestTooLarge.over_limit()
        refusal = hook_verify(hook=hook, headers=request.headers, body=body, now=time.time())
        if refusal is not None:
            raise HookUnauthorized({"detail": refusal.message, "reason": refusal.reason})
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
        if end_user:
            # The agent's limits per end user hold here as on every other way in (api.conversations).
            agent = Agent.objects.only(*END_USER_LIMIT_FIELDS).get(pk=hook.agent_id)
            try:
                end_user_limits_check(request, agent=agent, owner_id=hook.owner_id, end_user=end_user)
            except EndUserLimited as exc:
                raise exceptions.Throttled(wait=exc.retry_after, detail=exc.message) from None
        # Verified above: "sha256=" and the hex digest the hook's secret gives.
        signature = request.headers[SIGNATURE_HEADER].removeprefix("sha256=")
        try:
            run = hook_deliver(
                hook=hook, delivery_id=delivery_id, signature=signature, content=content, end_user=end_user
            )
        except HookDeliveryReplayed as exc:
            raise ApiConflict(_replayed(exc.delivery.run_id)) from None
        return Response({"run": str(run.pk), "delivery": delivery_id}, status=status.HTTP_202_ACCEPTED)
