"""Evaluations: suites and their cases, starting eval runs and reading their metrics and
results. Each action asks for the model permission that matches it (evals.view_evalsuite,
add_evalsuite, add_evalcase, add_evalrun, view_evalrun); being a staff member is not enough."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import Count
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from agents.releases import DRAFT, PUBLISHED
from api.common import ErrorSerializer, JSONInputField, agent_named, reject_nul
from api.throttles import ApiUserThrottle, RunStartThrottle
from evals.jsonl import CASE_FIELDS
from evals.models import EvalCase, EvalResult, EvalRun, EvalSuite
from evals.services import VersionNotFound, eval_run_start, eval_version_resolve
from workspaces.access import current_workspace, in_workspace
from workspaces.defaults import default_workspace_id
from workspaces.names import NAME_TAKEN

JSON_CASE_FIELDS = ("turns", "expected_tool_calls", "forbidden_tools", "answer_schema", "tool_results")


class ActionPermission(permissions.BasePermission):
    """The model permissions the view names for its action and method. A method the route does
    not take has no action: it passes here and is answered 405."""

    def has_permission(self, request, view):
        if view.action is None:
            return True
        needed = view.permissions_needed.get((view.action, request.method))
        return needed is not None and request.user.has_perms(needed)


class EvalSuiteSerializer(serializers.ModelSerializer):
    cases = serializers.IntegerField(source="case_count", read_only=True, help_text="How many cases it holds.")

    class Meta:
        model = EvalSuite
        fields = ["id", "name", "description", "created_at", "cases"]

    def validate_name(self, name: str) -> str:
        # Names are the workspace's (workspaces.names): the suite is made where the token acts
        # (none chosen: the first workspace), and another workspace's suite of this name is
        # neither refused nor confirmed.
        workspace = current_workspace(self.context["request"].user)
        workspace_id = workspace.pk if workspace is not None else default_workspace_id()
        taken = EvalSuite.objects.filter(workspace_id=workspace_id, name=name)
        if self.instance is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise serializers.ValidationError(NAME_TAKEN)
        return name


class EvalCaseSerializer(serializers.ModelSerializer):
    """A case, checked as the admin and the JSONL import check it (EvalCase.clean): a bad
    regular expression or JSON Schema, or malformed turns, is a 400."""

    turns = JSONInputField(help_text='[{"role": "user"|"assistant", "content": "…"}, …]; the last is the user\'s.')
    expected_tool_calls = JSONInputField(
        required=False,
        default=list,
        help_text='[{"name": "…", "arguments": {subset}, "arguments_schema": {…}, "arguments_pattern": "regex"}]',
    )
    forbidden_tools = JSONInputField(required=False, default=list, help_text="Tool names that must not be called.")
    answer_schema = JSONInputField(required=False, allow_null=True, default=None)
    tool_results = JSONInputField(
        required=False, default=dict, help_text='{"tool name": "result text"}: given instead of calling the tool.'
    )

    class Meta:
        model = EvalCase
        # The fields a case moves with as JSON Lines: one list for both.
        fields = ["id", *CASE_FIELDS]
        # The suite comes from the URL; EvalCase.full_clean checks the name is new in it.
        validators = []

    def validate(self, attrs):
        for field in JSON_CASE_FIELDS:
            if value := attrs.get(field):
                try:
                    reject_nul(value)
                except serializers.ValidationError as exc:
                    raise serializers.ValidationError({field: exc.detail}) from None
        case = EvalCase(suite=self.context["suite"], **attrs)
        try:
            case.full_clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError(serializers.as_serializer_error(exc)) from None
        return attrs


class EvalResultSerializer(serializers.ModelSerializer):
    case = serializers.CharField(source="case.name", read_only=True)
    checks = serializers.ListField(
        child=serializers.DictField(), help_text='[{"kind": …, "passed": true|false, "reason": …}, …]'
    )

    class Meta:
        model = EvalResult
        fields = [
            "case",
            "repetition",
            "run",
            "scored",
            "passed",
            "checks",
            "tool_calls",
            "valid_tool_calls",
            "model_turns",
            "total_tokens",
            "cost",
            "latency_ms",
        ]


class EvalRunSerializer(serializers.ModelSerializer):
    agent = serializers.CharField(source="agent_version.agent.slug", read_only=True)
    agent_version = serializers.IntegerField(source="agent_version.number", read_only=True)
    metrics = serializers.DictField(
        allow_null=True, read_only=True, help_text="Stored when every result is scored (status completed)."
    )
    error = serializers.CharField(read_only=True, help_text="Why the eval run failed (status failed); else empty.")

    class Meta:
        model = EvalRun
        fields = [
            "id",
            "suite",
            "agent",
            "agent_version",
            "repetitions",
            "status",
            "error",
            "metrics",
            "started_at",
            "finished_at",
        ]


class EvalRunDetailSerializer(EvalRunSerializer):
    results = EvalResultSerializer(many=True, read_only=True, help_text="One per case and repetition.")

    class Meta(EvalRunSerializer.Meta):
        fields = EvalRunSerializer.Meta.fields + ["results"]


@extend_schema_field(OpenApiTypes.INT)
class WorkspaceSuiteField(serializers.PrimaryKeyRelatedField):
    """A suite of the workspace the request acts in; another workspace's is "does not exist"."""

    def get_queryset(self):
        return in_workspace(EvalSuite.objects.all(), self.context["request"].user)


class EvalRunCreateSerializer(serializers.Serializer):
    suite = WorkspaceSuiteField()
    agent = serializers.CharField(max_length=100, help_text="Slug of an agent from GET /api/v1/agents/.")
    version = serializers.CharField(
        max_length=20, default=DRAFT, help_text='"draft" (the default), "published" or a version number.'
    )
    repetitions = serializers.IntegerField(min_value=1, max_value=20, default=1)

    def validate_agent(self, slug: str):
        return agent_named(user=self.context["request"].user, slug=slug)

    def validate_version(self, version: str) -> str:
        if version in (DRAFT, PUBLISHED) or (version.isascii() and version.isdigit() and 0 < int(version) < 2**31):
            return version
        raise serializers.ValidationError(_('Must be "draft", "published" or a version number.'))

    def validate_suite(self, suite: EvalSuite) -> EvalSuite:
        if not suite.cases.exists():
            raise serializers.ValidationError(_("The suite has no cases."))
        return suite

    def validate(self, attrs):
        try:
            attrs["agent_version"] = eval_version_resolve(agent=attrs["agent"], version=attrs["version"])
        except VersionNotFound:
            raise serializers.ValidationError({"version": [_("The agent has no such version.")]}) from None
        return attrs


@extend_schema_view(
    list=extend_schema(
        summary="List eval suites",
        description="Every eval suite with its number of cases. Needs the permission to view eval suites.",
        responses={200: EvalSuiteSerializer(many=True), 403: ErrorSerializer},
    ),
    retrieve=extend_schema(
        summary="Read an eval suite",
        description="One eval suite and its number of cases.",
        responses={200: EvalSuiteSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    ),
    create=extend_schema(
        summary="Create an eval suite",
        description="A named, empty suite; add its cases with POST /eval-suites/{id}/cases/.",
        examples=[
            OpenApiExample(
                "A suite", value={"name": "weather", "description": "Seed 000's questions"}, request_only=True
            )
        ],
        responses={201: EvalSuiteSerializer, 400: ErrorSerializer, 403: ErrorSerializer},
    ),
)
class EvalSuiteViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = EvalSuiteSerializer
    lookup_value_regex = "[0-9]+"
    permission_classes = [permissions.IsAuthenticated, ActionPermission]
    permissions_needed = {
        ("list", "GET"): ("evals.view_evalsuite",),
        ("retrieve", "GET"): ("evals.view_evalsuite",),
        ("create", "POST"): ("evals.add_evalsuite",),
        ("cases", "GET"): ("evals.view_evalsuite",),
        ("cases", "POST"): ("evals.add_evalcase",),
    }

    def get_queryset(self):
        suites = EvalSuite.objects.annotate(case_count=Count("cases")).order_by("name")
        return in_workspace(suites, self.request.user)

    def perform_create(self, serializer):
        # In the workspace the token acts in (none chosen: the installation's first).
        serializer.save(workspace=current_workspace(self.request.user))
        # Read back with its case count, as the list shows it.
        serializer.instance = self.get_queryset().get(pk=serializer.instance.pk)

    def get_serializer_class(self):
        return EvalCaseSerializer if self.action == "cases" else EvalSuiteSerializer

    @extend_schema(
        methods=["GET"],
        responses={200: EvalCaseSerializer(many=True), 403: ErrorSerializer, 404: ErrorSerializer},
        summary="List a suite's cases",
        description="The suite's cases, in their order.",
    )
    @extend_schema(
        methods=["POST"],
        request=EvalCaseSerializer,
        responses={
            201: EvalCaseSerializer,
            400: OpenApiResponse(ErrorSerializer, description="A bad expectation, or a name the suite already has."),
            403: ErrorSerializer,
            404: ErrorSerializer,
        },
        summary="Add a case to a suite",
        description="Adds a case: the conversation to play, the tool calls it must (or must not) make, the tool "
        "results to give instead of calling live tools, and what the answer must contain or match.",
        examples=[
            OpenApiExample(
                "A weather question",
                value={
                    "name": "weather-chengdu",
                    "turns": [{"role": "user", "content": "我在成都，明天天气如何？"}],
                    "expected_tool_calls": [{"name": "mojitianqi-DayWeather", "arguments": {"city": "成都市"}}],
                    "forbidden_tools": ["gaodedetu-plan_bicycle"],
                    "tool_results": {"mojitianqi-DayWeather": '{"data": [{"condition": "多云"}]}'},
                    "answer_contains": "多云",
                },
                request_only=True,
            )
        ],
    )
    @action(detail=True, methods=["get", "post"])
    def cases(self, request, pk=None):
        suite = self.get_object()
        if request.method == "GET":
            page = self.paginate_queryset(suite.cases.order_by("position", "id"))
            return self.get_paginated_response(EvalCaseSerializer(page, many=True).data)
        serializer = EvalCaseSerializer(data=request.data, context={**self.get_serializer_context(), "suite": suite})
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            case = serializer.save(suite=suite)
        return Response(EvalCaseSerializer(case).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    list=extend_schema(
        summary="List eval runs",
        description="Eval runs, newest first, with their status and metrics.",
        responses={200: EvalRunSerializer(many=True), 403: ErrorSerializer},
    ),
    retrieve=extend_schema(
        summary="Read an eval run",
        description="One eval run with its metrics and every case's result (passed, failed checks, the run).",
        responses={200: EvalRunDetailSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    ),
)
class EvalRunViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    lookup_value_regex = "[0-9]+"
    permission_classes = [permissions.IsAuthenticated, ActionPermission]
    permissions_needed = {
        ("list", "GET"): ("evals.view_evalrun",),
        ("retrieve", "GET"): ("evals.view_evalrun",),
        ("create", "POST"): ("evals.add_evalrun",),
    }

    def get_queryset(self):
        runs = in_workspace(
            EvalRun.objects.select_related("agent_version__agent").order_by("-started_at"), self.request.user
        )
        if self.action == "retrieve":
            runs = runs.prefetch_related("results__case")
        return runs

    def get_throttles(self):
        # Starting an eval run starts runs (model calls): it spends the run-start budget too.
        if self.action == "create":
            return [ApiUserThrottle(), RunStartThrottle()]
        return super().get_throttles()

    def get_serializer_class(self):
        return {"create": EvalRunCreateSerializer, "retrieve": EvalRunDetailSerializer}.get(
            self.action, EvalRunSerializer
        )

    @extend_schema(
        request=EvalRunCreateSerializer,
        responses={
            201: EvalRunDetailSerializer,
            400: OpenApiResponse(ErrorSerializer, description="An unknown suite, agent or version, or no cases."),
            403: ErrorSerializer,
        },
        summary="Start an eval run",
        examples=[
            OpenApiExample(
                "The draft against a suite",
                value={"suite": 1, "agent": "customer-service", "version": "draft"},
                request_only=True,
            )
        ],
        description="Plays every case of the suite `repetitions` times on that version of the agent, through the "
        "queue; read the eval run until its status is completed, then its metrics are stored.",
    )
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        eval_run = eval_run_start(
            suite=data["suite"], agent_version=data["agent_version"], repetitions=data["repetitions"], user=request.user
        )
        eval_run = self.get_queryset().prefetch_related("results__case").get(pk=eval_run.pk)
        return Response(EvalRunDetailSerializer(eval_run).data, status=status.HTTP_201_CREATED)
