"""Runs: status and totals, the steps they took, cancellation; where a fork came from."""

from django.db.models import Prefetch
from django.urls import reverse
from django.utils.translation import gettext as _
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import pagination, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from api.common import ErrorSerializer, NewestFirstCursorPagination
from api.message_attachments import AttachmentPartSerializer, parts_out
from conversations.models import Run, RunStatus, RunTrigger, StopReason
from conversations.run_filters import SOURCES, RunFilterInvalid, runs_filtered
from conversations.selectors import (
    run_children_rows,
    run_owned_by,
    run_step_messages,
    run_timeline,
    runs_visible_to,
)
from engine.operations import user_may_operate
from engine.runs import run_cancel
from knowledge.selectors import citations_of, searches_prefetch
from platform_site.api_errors import ApiConflict
from workspaces.access import may_start_runs

# A run forked many times lists its newest forks; the rest are found by forked_from.
FORKS_SHOWN = 20
# A list carries no text that grows with what a user or a model wrote: a message, an answer or an
# edited tool result can be 100,000 characters, and a page holds many runs. The run's page has
# them whole.
LIST_TEXT_CHARS = 500
# What a list shows of a fork's change: its kind, who forked, and the short fields naming the
# change; an edited result, message or write results are left out.
FORK_CHANGE_LISTED = ("kind", "version", "model_config_id", "model", "tool_call_id", "real_writes", "by")


class UsageSerializer(serializers.Serializer):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    cached_tokens = serializers.IntegerField()
    reasoning_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    estimated = serializers.BooleanField(
        source="usage_estimated",
        help_text="True when (some of) these counts are estimates: the model server reported no usage.",
    )


class TreeTokensField(serializers.IntegerField):
    """The run's tokens with those of the runs it delegated to (their whole trees)."""

    def to_representation(self, run: Run) -> int:
        return run.total_tokens + run.children_tokens


class TreeCostField(serializers.DecimalField):
    """The run's cost with that of the runs it delegated to (their whole trees)."""

    def to_representation(self, run: Run) -> str:
        return super().to_representation(run.cost + run.children_cost)


def _never_started(run: Run) -> bool:
    """A run no worker has taken yet has searched nothing and started no child: the answer to a
    posted message (every post) reads neither."""
    return run.started_at is None


class CitationSerializer(serializers.Serializer):
    citation = serializers.CharField(help_text="The id the search tool gave the passage, e.g. C12.")
    knowledge_base = serializers.CharField()
    document = serializers.IntegerField()
    title = serializers.CharField()
    location = serializers.CharField(
        help_text='Where the passage is in its file, e.g. "page 3", "slide 2", "sheet Prices, rows 1–12"; '
        '"" for a whole file.'
    )
    chunk = serializers.IntegerField()
    score = serializers.FloatField()
    tool_call_id = serializers.CharField()


class ChildRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(source="agent.slug")
    status = serializers.CharField()
    stop_reason = serializers.CharField()
    parent_tool_invocation = serializers.IntegerField(source="parent_tool_invocation_id")


class RunSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    agent_version = serializers.IntegerField(source="agent_version.number", read_only=True)
    error = serializers.SerializerMethodField()
    input = serializers.SerializerMethodField()
    input_attachments = serializers.SerializerMethodField(
        help_text="The images, files and audio clips sent after the input's text, in order."
    )
    output = serializers.SerializerMethodField()
    output_parsed = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="The answer parsed as JSON, when the run's agent (or its /v1 request) declares an output schema "
        "and the answer matched it (docs/quality.md); null otherwise. output keeps the answer's text.",
    )
    usage = UsageSerializer(
        source="*",
        read_only=True,
        help_text="This run's own model calls; the runs it delegated to are in total_tokens_with_delegates.",
    )
    cost = serializers.DecimalField(
        max_digits=14,
        decimal_places=8,
        read_only=True,
        help_text="This run's own model calls; the runs it delegated to are in cost_with_delegates.",
    )
    # Each run of a tree counts its own usage, as the dashboards sum it: adding these up over runs
    # would count a delegated run twice.
    total_tokens_with_delegates = TreeTokensField(
        source="*",
        read_only=True,
        help_text="usage.total_tokens plus every token of the runs this run delegated to (agents as tools), "
        "down the tree, counted as each of them ended.",
    )
    cost_with_delegates = TreeCostField(
        source="*",
        max_digits=16,
        decimal_places=8,
        read_only=True,
        help_text="cost plus the cost of the runs this run delegated to (agents as tools), down the tree.",
    )
    duration_ms = serializers.IntegerField(read_only=True, allow_null=True)
    events_url = serializers.SerializerMethodField()
    citations = serializers.SerializerMethodField()
    children = serializers.SerializerMethodField(
        help_text="Runs this run delegated to (agents as tools), in the order they started."
    )
    fork_change = serializers.SerializerMethodField(
        help_text='For a fork: what it changed, e.g. {"kind": "version", "version": 3, "real_writes": false, '
        '"by": "alice"}; null for a run that is not a fork.'
    )
    tags = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="The tags the request that started the run gave it."
    )
    metadata = serializers.DictField(
        child=serializers.CharField(),
        read_only=True,
        help_text="The metadata (string pairs) the request that started the run gave it.",
    )
    trigger = serializers.ChoiceField(
        choices=RunTrigger.choices,
        read_only=True,
        help_text="What started the run: api (REST API), openai (/v1), widget, schedule, hook (inbound hook), "
        "console (operator console), cli (command line), fork, eval (evaluation or replay), delegation.",
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "conversation",
            "agent",
            "agent_version",
            "status",
            "stop_reason",
            "trigger",
            "error",
            "cancel_requested",
            "input",
            "input_attachments",
            "output",
            "output_parsed",
            "iterations",
            "usage",
            "cost",
            "total_tokens_with_delegates",
            "cost_with_delegates",
            "created_at",
            "started_at",
            "finished_at",
            "duration_ms",
            "events_url",
            "citations",
            "parent_run",
            "parent_tool_invocation",
            "children",
            "forked_from",
            "fork_step",
            "fork_change",
            "tags",
            "metadata",
        ]
        extra_kwargs = {
            "parent_run": {"help_text": "The run that delegated to this one (agents as tools), or null."},
            "parent_tool_invocation": {"help_text": "The parent's tool call that started this run, or null."},
            "forked_from": {"help_text": "For a fork: the run it was forked from (POST /runs/{id}/fork/), or null."},
            "fork_step": {
                "help_text": "For a fork: the step of its source it started from; its earlier steps were copied."
            },
        }

    def get_error(self, run: Run) -> str:
        # An internal error's text is a traceback: for operators (admin), not for API clients.
        if run.stop_reason == StopReason.INTERNAL_ERROR:
            return "An internal error stopped this run; operators can see the details."
        return run.error

    def get_input(self, run: Run) -> str | None:
        request = getattr(run, "request", None)
        return request.content if request else None

    @extend_schema_field(AttachmentPartSerializer(many=True))
    def get_input_attachments(self, run: Run) -> list[dict]:
        """The attachments sent with the input, read with it (no extra query)."""
        request = getattr(run, "request", None)
        return parts_out(request.parts if request else None, self.context["request"])

    def get_output(self, run: Run) -> str | None:
        """The final answer, once the run has completed (runs_visible_to annotates it)."""
        return getattr(run, "output", None)

    @extend_schema_field(CitationSerializer(many=True))
    def get_citations(self, run: Run) -> list[dict]:
        """The passages the run's knowledge searches returned (ordered as found)."""
        if _never_started(run):
            return []
        return citations_of(run.knowledge_searches.all())

    @extend_schema_field(ChildRunSerializer(many=True))
    def get_children(self, run: Run) -> list[dict]:
        if _never_started(run):
            return []
        return ChildRunSerializer(run.children.all(), many=True).data

    def get_events_url(self, run: Run) -> str:
        return self.context["request"].build_absolute_uri(reverse("run-events", kwargs={"run_id": run.pk}))

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_fork_change(self, run: Run) -> dict | None:
        if run.fork_change is None:
            return None
        # Who forked is named; their user id is internal.
        return {key: value for key, value in run.fork_change.items() if key != "by_id"}


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= LIST_TEXT_CHARS:
        return text
    return text[: LIST_TEXT_CHARS - 1] + "…"


class RunListSerializer(RunSerializer):
    """A run in a list (GET /runs/, an end user's runs): the texts cut short, a fork's change
    summarised. GET /runs/{id}/ has them whole."""

    error = serializers.SerializerMethodField(
        help_text=f"At most {LIST_TEXT_CHARS} characters in a list (ending with … when cut); whole on the run."
    )
    input = serializers.SerializerMethodField(
        help_text=f"At most {LIST_TEXT_CHARS} characters in a list (ending with … when cut); whole on the run."
    )
    output = serializers.SerializerMethodField(
        help_text=f"At most {LIST_TEXT_CHARS} characters in a list (ending with … when cut); whole on the run."
    )
    fork_change = serializers.SerializerMethodField(
        help_text='For a fork: what it changed and who forked, e.g. {"kind": "tool_result", "tool_call_id": '
        '"call_1", "real_writes": false, "by": "alice"}; an edited result or message and write results are on the '
        "run (GET /runs/{id}/). Null for a run that is not a fork."
    )

    def get_error(self, run: Run) -> str:
        return _cut(super().get_error(run))

    def get_input(self, run: Run) -> str | None:
        return _cut(super().get_input(run))

    def get_output(self, run: Run) -> str | None:
        return _cut(super().get_output(run))

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_fork_change(self, run: Run) -> dict | None:
        if run.fork_change is None:
            return None
        return {key: value for key, value in run.fork_change.items() if key in FORK_CHANGE_LISTED}


class RunDetailSerializer(RunSerializer):
    """One run, as GET /runs/{id}/ shows it: with the forks made of it."""

    forks = serializers.SerializerMethodField(
        help_text=f"Runs forked from this one that you may see, newest first (at most {FORKS_SHOWN})."
    )

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "forks"]

    @extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
    def get_forks(self, run: Run) -> list[str]:
        # Only a run that has ended is forked (engine.forks): a posted message's answer reads nothing.
        if not run.is_terminal:
            return []
        # Narrowed to the caller: another user's fork lives in their conversation.
        forks = runs_visible_to(user=self.context["request"].user).filter(forked_from=run)
        return [str(pk) for pk in forks.order_by("-created_at", "-id").values_list("pk", flat=True)[:FORKS_SHOWN]]


class LLMCallStepSerializer(serializers.Serializer):
    kind = serializers.CharField(default="llm_call")
    id = serializers.IntegerField()
    iteration = serializers.IntegerField()
    attempt = serializers.IntegerField()
    purpose = serializers.CharField()
    provider = serializers.CharField()
    model = serializers.CharField(source="model_name")
    status = serializers.CharField()
    http_status = serializers.IntegerField(allow_null=True)
    finish_reason = serializers.CharField()
    usage = UsageSerializer(source="*")
    cost = serializers.DecimalField(max_digits=14, decimal_places=8)
    latency_ms = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()
    content = serializers.SerializerMethodField(help_text="What the model wrote, when the call succeeded.")
    tool_calls = serializers.SerializerMethodField(help_text="The tool calls it asked for, in the OpenAI format.")
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    copied = serializers.BooleanField(
        help_text="Copied from the run this one was forked from (a step before the fork point): not made again, "
        "no usage of its own."
    )

    def get_content(self, call) -> str | None:
        message = self.context["messages"].get(call.pk)
        return message.content if message else None

    @extend_schema_field(serializers.ListField(child=serializers.DictField(), allow_null=True))
    def get_tool_calls(self, call):
        message = self.context["messages"].get(call.pk)
        return message.tool_calls if message else None


class ToolInvocationStepSerializer(serializers.Serializer):
    kind = serializers.CharField(default="tool_invocation")
    id = serializers.IntegerField()
    llm_call = serializers.IntegerField(source="llm_call_id")
    tool = serializers.CharField(source="tool_name")
    tool_call_id = serializers.CharField()
    arguments = serializers.JSONField(allow_null=True)
    raw_arguments = serializers.CharField()
    validation_errors = serializers.ListField(child=serializers.CharField())
    status = serializers.CharField()
    approval = serializers.SerializerMethodField(help_text="Status of the approval this call needed, if any.")
    result = serializers.CharField()
    truncated = serializers.BooleanField()
    simulated = serializers.BooleanField(
        help_text="The result an evaluation case or a fork gave; the tool was not called."
    )
    copied = serializers.BooleanField(
        help_text="Copied from the run this one was forked from (a step before the fork point): not run again."
    )
    error = serializers.CharField()
    latency_ms = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    child_runs = serializers.SerializerMethodField(help_text="Runs a delegate call started (agents as tools).")

    def get_child_runs(self, invocation) -> list[str]:
        return [str(child.pk) for child in invocation.child_runs.all()]

    def get_approval(self, invocation) -> str | None:
        # Reverse one-to-one: hasattr is False when the call needed no approval.
        return invocation.approval.status if hasattr(invocation, "approval") else None


STEP_SERIALIZERS = {"llm_call": LLMCallStepSerializer, "tool_invocation": ToolInvocationStepSerializer}


STEP_SCHEMA = PolymorphicProxySerializer(
    component_name="RunStep",
    serializers=STEP_SERIALIZERS,
    resource_type_field_name="kind",
    many=True,
)


class RunFilterSerializer(serializers.Serializer):
    """The list's query parameters: the model's own fields here, the rest as the admin's runs
    list reads them (conversations.run_filters)."""

    conversation = serializers.UUIDField(required=False)
    status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
    trigger = serializers.ChoiceField(choices=RunTrigger.choices, required=False, help_text="What started the run.")
    source = serializers.ChoiceField(
        choices=SOURCES,
        required=False,
        help_text="What started the run, as trigger, except that fork means a fork that changed something and "
        "replay a fork that changed nothing.",
    )
    agent = serializers.CharField(required=False, max_length=100, help_text="Slug of the run's agent.")
    version = serializers.IntegerField(
        required=False, min_value=1, max_value=2**31 - 1, help_text="The agent's version number; needs agent."
    )
    tag = serializers.CharField(required=False, max_length=100, help_text="Runs carrying this tag.")
    meta = serializers.CharField(
        required=False, max_length=700, help_text="Runs whose metadata has this pair, written key:value."
    )
    cost_min = serializers.DecimalField(max_digits=14, decimal_places=8, required=False, min_value=0)
    cost_max = serializers.DecimalField(max_digits=14, decimal_places=8, required=False, min_value=0)
    duration_min = serializers.DecimalField(
        max_digits=12, decimal_places=3, required=False, min_value=0, help_text="Seconds from start to end."
    )
    duration_max = serializers.DecimalField(
        max_digits=12, decimal_places=3, required=False, min_value=0, help_text="Seconds from start to end."
    )

    def validate(self, attrs):
        if "version" in attrs and "agent" not in attrs:
            raise serializers.ValidationError({"version": [_("Give the agent too: a version number is the agent's.")]})
        return attrs


def runs_listed(runs, filters: dict):
    """`runs` narrowed by the list's validated parameters."""
    filters = dict(filters)
    runs = runs.filter(**{name: filters.pop(name) for name in ("conversation", "status", "trigger") if name in filters})
    if "agent" in filters:
        runs = runs.filter(agent__slug=filters.pop("agent"))
    if "version" in filters:
        runs = runs.filter(agent_version__number=filters.pop("version"))
    try:
        return runs_filtered(runs, {name: str(value) for name, value in filters.items()})
    except RunFilterInvalid as exc:
        raise serializers.ValidationError({exc.field: [exc.message]}) from None


@extend_schema_view(
    list=extend_schema(
        parameters=[RunFilterSerializer],
        summary="List runs",
        description="Runs of the conversations you may see, newest first, with status, stop reason, tokens, "
        "cost and duration, and what started each (`trigger`). Texts longer than "
        f"{LIST_TEXT_CHARS} characters (question, answer, error) are cut short and a fork's edited text is left "
        "out: GET /runs/{id}/ has them whole. Filter by conversation, status, trigger or source, agent and "
        "version, tag, metadata pair (meta=key:value), cost and duration ranges. Paged by cursor: "
        "follow `next` (older runs) and "
        "`previous`; there is no page number or total count, so a page costs the same however large the ledger.",
    ),
    retrieve=extend_schema(
        responses={200: RunDetailSerializer},
        summary="Read a run",
        description="One run: its status and stop reason, the user's message and the answer, tokens by kind, "
        "cost, duration, what started it, citations, the runs it delegated to and the forks made of it (and, for "
        "a fork, where it came from and what it changed). Poll it, or follow its events.",
    ),
)
class RunViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = RunListSerializer
    pagination_class = NewestFirstCursorPagination

    def get_serializer_class(self):
        if self.action == "retrieve":
            return RunDetailSerializer
        return RunListSerializer if self.action == "list" else RunSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, only the model
            return Run.objects.none()
        runs = runs_visible_to(user=self.request.user).prefetch_related(
            searches_prefetch(), Prefetch("children", queryset=run_children_rows())
        )
        if self.action == "list":
            filters = RunFilterSerializer(data=self.request.query_params)
            filters.is_valid(raise_exception=True)
            runs = runs_listed(runs, filters.validated_data)
        return runs

    @extend_schema(
        responses={200: STEP_SCHEMA},
        parameters=[OpenApiParameter("page", int, description="Page number (50 steps a page).")],
        summary="List a run's steps",
        description="The run's model calls and tool invocations in the order they happened: what the model "
        "answered, which tools it called with which arguments, their results, approvals, tokens and latency.",
    )
    @action(detail=True, methods=["get"])
    def steps(self, request, pk=None):
        run = self.get_object()
        steps = run_timeline(run=run)
        # One run's steps are a short list, paged by number (the runs list is paged by cursor).
        paginator = pagination.PageNumberPagination()
        page = paginator.paginate_queryset(steps, request, view=self)
        context = {"messages": run_step_messages(run=run)}
        return paginator.get_paginated_response(
            [STEP_SERIALIZERS[step["kind"]](step["obj"], context=context).data for step in page]
        )

    @extend_schema(
        request=None,
        responses={202: RunSerializer, 200: RunSerializer, 403: ErrorSerializer, 409: ErrorSerializer},
        summary="Cancel a run",
        description="Queued and parked runs end at once; a running run stops at its next step (202).",
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        run = self.get_object()
        # Who may start runs may stop their own; anyone else's takes operating runs.
        owned = run_owned_by(run=run, user=request.user)
        if owned and not may_start_runs(request.user) and not user_may_operate(request.user):
            raise PermissionDenied(_("Your token may not start or stop runs in this workspace."))
        if not (owned or user_may_operate(request.user)):
            raise PermissionDenied(
                _("This run belongs to another user's conversation; you may read it but not cancel it.")
            )
        if run.status == RunStatus.CANCELLED:
            return Response(self.get_serializer(run).data, status=status.HTTP_200_OK)
        if run.is_terminal:
            raise ApiConflict(
                _("The run is already %(status)s; it can no longer be cancelled.") % {"status": run.status}
            )
        cancelled = run_cancel(run=run, by=request.user)
        if cancelled.is_terminal and cancelled.status != RunStatus.CANCELLED:
            # It ended while this request was on its way: the cancel came too late.
            raise ApiConflict(
                _("The run is already {status}; it can no longer be cancelled.").format(status=cancelled.status)
            )
        return Response(self.get_serializer(self.get_object()).data, status=status.HTTP_202_ACCEPTED)
