"""POST /api/v1/runs/{id}/fork/: a new run from step N of an ended run, with one thing changed
(engine.forks). It takes the permission to fork runs (conversations.fork_run; a token acts as
its user), and the run must be one the caller may see (as GET /runs/{id}/), else 404. Choosing
the version or the model config takes what a posted message's choice takes (agents.run_choices)."""

from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import permissions, serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from agents.releases import DRAFT, PUBLISHED
from api.common import ErrorSerializer, reject_nul
from api.runs import RunDetailSerializer
from api.throttles import ApiUserThrottle, RunStartThrottle
from conversations.models import ForkChange
from conversations.permissions import FORK_PERMISSION
from conversations.selectors import runs_visible_to
from engine.forks import ForkInvalid, ForkNotAllowed, ForkRequest, run_fork

MAX_TEXT = 100_000  # an edited result or message, a write result
MAX_WRITE_RESULTS = 50
MAX_INT = 2**31 - 1  # a PostgreSQL integer: past it, no step, version or row id

# The fields that belong to one kind of change: sent with another, they would be ignored.
CHANGE_FIELDS = {
    "version": ForkChange.VERSION,
    "model_config": ForkChange.MODEL,
    "tool_call_id": ForkChange.TOOL_RESULT,
    "result": ForkChange.TOOL_RESULT,
    "message": ForkChange.USER_MESSAGE,
}
REQUIRED_FIELDS = {
    ForkChange.VERSION: ("version",),
    ForkChange.MODEL: ("model_config",),
    ForkChange.TOOL_RESULT: ("tool_call_id", "result"),
    ForkChange.USER_MESSAGE: ("message",),
}


class MayForkRuns(permissions.BasePermission):
    message = gettext_lazy("Forking a run takes the permission to fork runs.")

    def has_permission(self, request, view):
        return request.user.has_perm(FORK_PERMISSION)


def _text(**kwargs) -> serializers.CharField:
    # Tool results and messages are kept as sent: leading blanks may be what the test is about.
    return serializers.CharField(max_length=MAX_TEXT, trim_whitespace=False, validators=[reject_nul], **kwargs)


class ForkSerializer(serializers.Serializer):
    step = serializers.IntegerField(
        min_value=1, max_value=MAX_INT, help_text="The step (model call, from 1) the fork starts from."
    )
    change = serializers.ChoiceField(choices=ForkChange.choices, default=ForkChange.NONE)
    version = serializers.CharField(
        required=False, max_length=20, help_text='change=version: "draft", "published" or a version number.'
    )
    model_config = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_INT, help_text="change=model: the id of a model config."
    )
    tool_call_id = serializers.CharField(
        required=False,
        max_length=128,
        validators=[reject_nul],
        help_text="change=tool_result: which tool call of the step gets a new result.",
    )
    result = _text(required=False, allow_blank=True, help_text="change=tool_result: what that call returns instead.")
    message = _text(required=False, help_text="change=user_message: the run's user message instead (step 1).")
    write_results = serializers.DictField(
        child=_text(allow_blank=True),
        required=False,
        default=dict,
        help_text="{tool name: result}: what a write tool returns in the fork when its source made no such call.",
    )
    real_writes = serializers.BooleanField(
        default=False,
        help_text="A write with no recorded or given result waits for an approval to run for real; "
        "otherwise it fails without running.",
    )

    def validate_version(self, version: str) -> str | int:
        if version in (DRAFT, PUBLISHED):
            return version
        if version.isascii() and version.isdigit() and 0 < int(version) <= MAX_INT:
            return int(version)
        raise serializers.ValidationError(_('Must be "draft", "published" or a version number.'))

    def validate_write_results(self, results: dict) -> dict:
        if len(results) > MAX_WRITE_RESULTS:
            raise serializers.ValidationError(
                _("At most %(count)s tools may be given results.") % {"count": MAX_WRITE_RESULTS}
            )
        for name in results:
            if not name or len(name) > 200 or "\x00" in name:
                raise serializers.ValidationError(_("%(name)r is not a tool name.") % {"name": name[:200]})
        return results

    def validate(self, attrs):
        change = attrs["change"]
        errors = {
            name: [_("Only with change=%(change)s.") % {"change": owner}]
            for name, owner in CHANGE_FIELDS.items()
            if name in attrs and owner != change
        }
        for name in REQUIRED_FIELDS.get(change, ()):
            if name not in attrs:
                errors[name] = [_("Required with change=%(change)s.") % {"change": change}]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def fork_request(self) -> ForkRequest:
        data = self.validated_data
        return ForkRequest(
            step=data["step"],
            change=data["change"],
            version=data.get("version"),
            model_config_id=data.get("model_config"),
            tool_call_id=data.get("tool_call_id", ""),
            result=data.get("result", ""),
            message=data.get("message", ""),
            write_results=data["write_results"],
            real_writes=data["real_writes"],
        )


class RunForkView(APIView):
    permission_classes = [permissions.IsAuthenticated, MayForkRuns]
    # A fork is a run: it spends the run-start budget too.
    throttle_classes = [ApiUserThrottle, RunStartThrottle]

    @extend_schema(
        operation_id="runs_fork_create",
        tags=["runs"],
        request=ForkSerializer,
        responses={
            202: RunDetailSerializer,
            400: OpenApiResponse(
                ErrorSerializer,
                description="A bad body, or a fork that cannot be made: the run has not ended, no such step, "
                "version, model config or tool call of the step.",
            ),
            403: OpenApiResponse(
                ErrorSerializer,
                description="You may not fork runs, may not use this run's agent, or may not choose that version "
                "(it takes the permission to test agent versions) or model config (one the agent does not use takes "
                "the permission to change model configs).",
            ),
            404: ErrorSerializer,
        },
        summary="Fork a run at a step",
        description="Starts a new run of the same agent, in a new conversation of yours, from step `step` of an "
        "ended run: the steps before are copied (`copied` on their model calls and tool invocations), then it "
        "runs from there with one change: nothing (a replay), the agent `version`, the `model_config`, one tool "
        "call's `result` in that step, or the user `message` (step 1). Side effects are never repeated: a call "
        "the source made gets its recorded result, a read tool runs live, a write tool gets the result in "
        "`write_results`, or with `real_writes` waits for an approval, or else fails without running. "
        "Answers 202 with the fork (status `queued`); its `forked_from`, `fork_step` and `fork_change` say what "
        "it is. Takes the permission to fork runs; naming a `version` (or forking a run of a version never "
        "published) also takes the permission to test agent versions, as a posted message's `version` does, and a "
        "`model_config` the agent does not use (its model, its fallback or one of its versions') takes the "
        "permission to change model configs.",
        examples=[
            OpenApiExample("Replay from step 2", value={"step": 2}, request_only=True),
            OpenApiExample(
                "Another version", value={"step": 1, "change": "version", "version": "draft"}, request_only=True
            ),
            OpenApiExample(
                "An edited tool result",
                value={"step": 2, "change": "tool_result", "tool_call_id": "call_1", "result": "Sold out."},
                request_only=True,
            ),
        ],
    )
    def post(self, request, run_id):
        source = get_object_or_404(runs_visible_to(user=request.user), pk=run_id)
        body = ForkSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            fork = run_fork(source=source, request=body.fork_request(), user=request.user)
        except ForkNotAllowed as exc:
            raise PermissionDenied(str(exc)) from None
        except ForkInvalid as exc:
            raise serializers.ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [str(exc)]}) from None
        fork = runs_visible_to(user=request.user).get(pk=fork.pk)
        return Response(RunDetailSerializer(fork, context={"request": request}).data, status=status.HTTP_202_ACCEPTED)
