"""GET /api/v1/agents/: the agents the caller may talk to."""

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, viewsets

from agents.models import Agent, AgentTool
from agents.selectors import agents_usable_by
from tools.approval_policy import effective_policy


class AgentToolSerializer(serializers.Serializer):
    name = serializers.CharField(source="tool.name")
    description = serializers.CharField(source="model_description")
    approval = serializers.SerializerMethodField(
        help_text="When a call waits for a person: never, always, or rule (when `approval_rule` matches)."
    )
    approval_rule = serializers.SerializerMethodField()

    def _effective(self, link: AgentTool) -> tuple[str, str]:
        tool = link.tool
        return effective_policy(
            tool_policy=tool.approval_policy,
            tool_rule=tool.approval_rule,
            side_effect=tool.side_effect,
            override=link.approval,
            override_rule=link.approval_rule,
        )

    def get_approval(self, link: AgentTool) -> str:
        return self._effective(link)[0]

    def get_approval_rule(self, link: AgentTool) -> str:
        return self._effective(link)[1]


class AgentSerializer(serializers.ModelSerializer):
    tools = AgentToolSerializer(source="enabled_tools", many=True, read_only=True)

    class Meta:
        model = Agent
        fields = ["slug", "name", "description", "concurrent_messages", "max_iterations", "tools"]


@extend_schema_view(
    list=extend_schema(
        summary="List the agents you may use",
        description="Every enabled agent your token's user may talk to (group restrictions apply), with its "
        "enabled tools and whether each needs an approval. Use an agent's `slug` to start a conversation.",
    ),
    retrieve=extend_schema(
        summary="Read one agent",
        description="One agent by its slug: its limits and the tools it may call. 404 when it does not exist or "
        "you may not use it.",
    ),
)
class AgentViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = AgentSerializer
    lookup_field = "slug"
    lookup_value_regex = "[-a-zA-Z0-9_]+"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, only the model
            return Agent.objects.none()
        tools = (
            AgentTool.objects.filter(enabled=True, tool__is_active=True).select_related("tool").order_by("tool__name")
        )
        return (
            agents_usable_by(user=self.request.user)
            .order_by("slug")
            .prefetch_related(Prefetch("agent_tools", queryset=tools, to_attr="enabled_tools"))
        )
