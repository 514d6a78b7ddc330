"""/api/v1/approvals/: list and read approvals, and decide one (`POST {id}/decision/`)."""

from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response

from api.common import ErrorSerializer, JSONInputField
from conversations.approvals.selectors import approvals_filter, approvals_visible_to
from conversations.models import Approval
from conversations.permissions import DECIDE_PERMISSION
from engine.approvals import (
    APPROVE,
    REJECT,
    ApprovalConflict,
    ApprovalInvalid,
    ApprovalNotAllowed,
    approval_decide,
)
from platform_site.api_errors import ApiConflict
from workspaces.access import may_act_on_own


class ApprovalSerializer(serializers.ModelSerializer):
    run = serializers.UUIDField(source="run_id", read_only=True)
    conversation = serializers.UUIDField(source="run.conversation_id", read_only=True)
    agent = serializers.CharField(source="run.agent.slug", read_only=True)
    # Agents as tools: asked inside a run another agent delegated to, this names that run.
    parent_run = serializers.UUIDField(
        source="run.parent_run_id", read_only=True, allow_null=True, help_text="The run that delegated to this run."
    )
    parent_agent = serializers.CharField(
        source="run.parent_run.agent.slug", read_only=True, default=None, allow_null=True
    )
    tool = serializers.CharField(source="invocation.tool_name", read_only=True)
    original_arguments = serializers.JSONField(
        source="invocation.arguments", read_only=True, help_text="What the model asked for."
    )
    arguments = serializers.JSONField(read_only=True, help_text="What is (or was) approved; edited if they differ.")
    why = serializers.CharField(source="request_reason", read_only=True)
    decided_by = serializers.CharField(source="decided_by.get_username", read_only=True, default=None, allow_null=True)
    # Read-only model fields lose allow_blank; an undecided approval has no channel yet.
    channel = serializers.ChoiceField(choices=Approval.Channel.choices, read_only=True, allow_blank=True)

    class Meta:
        model = Approval
        fields = [
            "id",
            "status",
            "kind",
            "run",
            "conversation",
            "agent",
            "parent_run",
            "parent_agent",
            "tool",
            "tool_call_id",
            "original_arguments",
            "arguments",
            "arguments_hash",
            "why",
            "created_at",
            "expires_at",
            "decided_by",
            "decided_at",
            "channel",
            "reason",
        ]
        read_only_fields = fields


class DecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=[APPROVE, REJECT])
    arguments = JSONInputField(required=False, help_text="Edited arguments to approve instead (approve only).")
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="Sent to the model as the tool result when rejecting; for a hand-off (kind `handoff`), "
        "the person's answer when approving (required then).",
    )
    for_rest_of_run = serializers.BooleanField(
        required=False, default=False, help_text="Approve every call of this tool for the rest of this run."
    )
    arguments_hash = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=64,
        help_text="The hash you saw; the decision is refused (409) if the approval's arguments differ.",
    )

    def validate_arguments(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError(_("Must be a JSON object."))
        return value


class ApprovalFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=[*Approval.Status.values, "decided"], required=False, help_text="`decided` is every status but pending."
    )
    agent = serializers.CharField(required=False, help_text="agent slug")
    tool = serializers.CharField(required=False, help_text="tool name")
    run = serializers.UUIDField(required=False, help_text="run id")


@extend_schema_view(
    list=extend_schema(
        parameters=[ApprovalFilterSerializer],
        summary="List approvals",
        description="The approvals you may see, oldest first: tool calls (and hand-offs) that wait for a person, "
        "and those already decided. Filter by status, agent, tool or run.",
    ),
    retrieve=extend_schema(
        summary="Read one approval",
        description="The exact call waiting for a decision: the tool, its arguments and their hash, the run and "
        "the agent, and the decision once made.",
    ),
)
class ApprovalViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = ApprovalSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user to narrow to
            return Approval.objects.none()
        queryset = approvals_visible_to(user=self.request.user)
        if self.action != "list":
            return queryset
        filters = ApprovalFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        return approvals_filter(queryset=queryset, **filters.validated_data).order_by("created_at")

    @extend_schema(
        summary="Approve, edit or reject a pending call",
        description="Decides a pending approval once. `approve` runs the call as it is; `approve` with "
        "`arguments` runs it with edited arguments (checked against the tool's schema); `reject` gives the "
        "model your `reason` instead of a result. Send the `arguments_hash` you were shown so that a call "
        "whose arguments changed meanwhile answers 409 instead of running. The run continues in the queue.",
        examples=[
            OpenApiExample("Approve", value={"decision": "approve"}, request_only=True),
            OpenApiExample(
                "Approve with edited arguments",
                value={"decision": "approve", "arguments": {"city": "成都"}},
                request_only=True,
            ),
            OpenApiExample(
                "Reject with a reason",
                value={"decision": "reject", "reason": "Booking is closed today."},
                request_only=True,
            ),
        ],
        request=DecisionSerializer,
        responses={
            200: ApprovalSerializer,
            400: ErrorSerializer,
            403: OpenApiResponse(ErrorSerializer, description="You may not decide approvals."),
            409: OpenApiResponse(ErrorSerializer, description="Already decided, expired, or its arguments changed."),
        },
    )
    @action(detail=True, methods=["post"])
    def decision(self, request, pk=None):
        approval = self.get_object()
        # A role or token without the decision (a viewer's) reads the queue but decides nothing.
        if not may_act_on_own(request.user, DECIDE_PERMISSION):
            raise PermissionDenied(_("Your token may not decide approvals."))
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            approval = approval_decide(
                approval_id=approval.pk,
                user=request.user,
                decision=data["decision"],
                channel=Approval.Channel.API,
                arguments=data.get("arguments"),
                reason=data.get("reason", ""),
                for_rest_of_run=data["for_rest_of_run"],
                expected_hash=data.get("arguments_hash", ""),
            )
        except ApprovalNotAllowed as exc:
            raise PermissionDenied(str(exc)) from exc
        except ApprovalConflict as exc:
            raise ApiConflict(str(exc)) from exc
        except ApprovalInvalid as exc:
            field = "reason" if approval.kind == Approval.Kind.HANDOFF else "arguments"
            raise ValidationError({field: exc.errors}) from exc
        return Response(ApprovalSerializer(self.get_queryset().get(pk=approval.pk)).data, status=status.HTTP_200_OK)
