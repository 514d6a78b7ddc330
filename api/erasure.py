"""DELETE /api/v1/end-users/{end_user}/: forget one of your end users (memory.forget).

An application may always forget its own end users, with no permission beyond its token: the
person asked it to (GDPR's right to erasure), and it can only reach the end users of its own
conversations, so no one else's are touched. The answer is the erasure's audit row: the digest
that stands for the id, and how many rows of each kind were deleted or anonymised."""

from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from api.common import ErrorSerializer
from api.end_users import END_USER_PARAMETER, end_user_from_path
from conversations.models import EndUserErasure
from memory.forget import EndUserBusy, EndUserUnknown, end_user_forget
from platform_site.api_errors import ApiConflict


class ErasureSerializer(serializers.ModelSerializer):
    class Meta:
        model = EndUserErasure
        fields = ["id", "end_user_digest", "channel", "counts", "created_at"]


class EndUserErasureView(APIView):
    @extend_schema(
        request=None,
        parameters=[END_USER_PARAMETER],
        responses={200: ErasureSerializer, 400: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
        summary="Forget an end user",
        description="Deletes the content of your end user's conversations (messages, model calls' requests and "
        "responses, tool arguments and results, titles, metadata, summaries), their memories and their feedback, "
        "keeping the runs' accounting (tokens, cost, status, timings) anonymised, and records who asked. 404 "
        "when you have nothing of this end user; 409 while one of their runs is still going.",
    )
    def delete(self, request, end_user):
        end_user = end_user_from_path(end_user)
        try:
            erasure = end_user_forget(
                owner_id=request.user.pk,
                end_user=end_user,
                requested_by=request.user,
                channel=EndUserErasure.Channel.API,
            )
        except EndUserUnknown:
            raise Http404 from None
        except EndUserBusy:
            raise ApiConflict(
                _("A run of this end user is still in progress; cancel it or wait for it to end, then try again.")
            ) from None
        return Response(ErasureSerializer(erasure).data)
