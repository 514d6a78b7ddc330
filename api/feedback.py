"""/api/v1/runs/{id}/feedback/: an end user's rating of a run's answer (+1 or -1, and a comment).

Posted by the application that owns the conversation, for its end user; anyone else is told the
run does not exist (404), as the rest of the API answers for another user's rows. One per run:
a later post replaces the earlier one."""

from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from api.common import ErrorSerializer, reject_nul
from conversations.feedback import RunNotFinished, run_feedback_set
from conversations.models import Run, RunFeedback
from platform_site.api_errors import ApiConflict
from workspaces.access import in_workspace


class FeedbackSerializer(serializers.ModelSerializer):
    rating = serializers.ChoiceField(choices=[1, -1], help_text="1: the answer helped; -1: it did not.")
    comment = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, default="", validators=[reject_nul]
    )

    class Meta:
        model = RunFeedback
        fields = ["run", "rating", "comment", "created_at", "updated_at"]
        read_only_fields = ["run", "created_at", "updated_at"]


def _own_run(*, user, run_id) -> Run:
    own = Run.objects.filter(pk=run_id, conversation__owner=user).only("pk", "status")
    run = in_workspace(own, user).first()
    if run is None:
        raise Http404
    return run


class RunFeedbackView(APIView):
    @extend_schema(
        responses={200: FeedbackSerializer, 404: ErrorSerializer},
        summary="Read a run's feedback",
        description="The rating and comment posted on a run of one of your conversations; 404 if none yet.",
    )
    def get(self, request, run_id):
        feedback = RunFeedback.objects.filter(run=_own_run(user=request.user, run_id=run_id)).first()
        if feedback is None:
            raise Http404
        return Response(FeedbackSerializer(feedback).data)

    @extend_schema(
        request=FeedbackSerializer,
        responses={201: FeedbackSerializer, 200: FeedbackSerializer, 400: ErrorSerializer, 409: ErrorSerializer},
        summary="Rate a run's answer",
        description="Your end user's rating (1 or -1) of a finished run's answer, with an optional comment "
        "(at most 2000 characters). 201 for the first, 200 when it replaces an earlier one; 409 while the run "
        "is still going.",
    )
    def post(self, request, run_id):
        run = _own_run(user=request.user, run_id=run_id)
        body = FeedbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            feedback, created = run_feedback_set(
                run=run, rating=body.validated_data["rating"], comment=body.validated_data["comment"], by=request.user
            )
        except RunNotFinished:
            raise ApiConflict(
                _("The run is still %(status)s; feedback is for a run that has ended.") % {"status": run.status}
            ) from None
        return Response(
            FeedbackSerializer(feedback).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )
