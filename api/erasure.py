"""DELETE /api/v1/end-users/{end_user}/: forget one of your end users (memory.forget).

An application may always forget its own end users, with no permission beyond its token: the
person asked it to (GDPR's right to erasure), and it can only reach the end users of its own
conversations, so no one else's are touched. The platform's own end users (no owner: the
command line, the demo, a schedule or hook without an owner) are nobody's token's: `?owner=none`
forgets one of those, for staff holding conversations.forget_end_user, the permission the
admin's forget action asks. The answer is the erasure's audit row: the digest that stands for
the id, and how many rows of each kind were deleted or anonymised."""

from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from api.common import ErrorSerializer
from api.end_users import END_USER_PARAMETER, end_user_from_path
from conversations.end_users import EndUser
from conversations.models import EndUserErasure
from conversations.permissions import user_may_forget
from memory.forget import EndUserBusy, EndUserUnknown, end_user_forget
from platform_site.api_errors import ApiConflict

NO_OWNER = "none"


class ErasureSerializer(serializers.ModelSerializer):
    class Meta:
        model = EndUserErasure
        fields = ["id", "end_user_digest", "channel", "counts", "created_at"]


class ErasureQuerySerializer(serializers.Serializer):
    owner = serializers.ChoiceField(
        choices=[NO_OWNER],
        required=False,
        help_text="none: the platform's own end user (no owner: the command line, the demo, a schedule or hook "
        "without an owner), not yours; staff with the permission to forget end users only.",
    )


def erasure_person(request, end_user: str) -> EndUser:
    """Whose end user the call forgets: the caller's own, or with ?owner=none the platform's,
    which takes the staff permission (a 403 before anything is looked up)."""
    query = ErasureQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    if query.validated_data.get("owner") != NO_OWNER:
        return EndUser(request.user.pk, end_user)
    if not user_may_forget(request.user):
        raise PermissionDenied(
            _(
                "Forgetting an end user no application owns takes a staff account with the permission to forget "
                "end users."
            )
        )
    return EndUser(None, end_user)


class EndUserErasureView(APIView):
    @extend_schema(
        request=None,
        parameters=[END_USER_PARAMETER, ErasureQuerySerializer],
        responses={
            200: ErasureSerializer,
            400: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
        },
        summary="Forget an end user",
        description="Deletes the content of your end user's conversations (messages, model calls' requests and "
        "responses, tool arguments and results, titles, metadata, summaries) and of every copy made of their runs "
        "(delegated runs, forks, replays and eval cases made from them), their memories and their feedback, "
        "keeping the runs' accounting (tokens, cost, status, timings) anonymised, and records who asked. 404 "
        "when you have nothing of this end user; 409 while one of their runs, or a copy of one, is still going. "
        "With ?owner=none, the platform's own end user instead (staff with the permission to forget end users; "
        "403 for anyone else).",
    )
    def delete(self, request, end_user):
        person = erasure_person(request, end_user_from_path(end_user))
        try:
            erasure = end_user_forget(person=person, requested_by=request.user, channel=EndUserErasure.Channel.API)
        except EndUserUnknown:
            raise Http404 from None
        except EndUserBusy:
            raise ApiConflict(
                _(
                    "A run of this end user, or a fork or replay of one, is still in progress; cancel it or wait for "
                    "it to end, then try again."
                )
            ) from None
        return Response(ErasureSerializer(erasure).data)
