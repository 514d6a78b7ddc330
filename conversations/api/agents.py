"""GET /api/v1/agents/: the agents the caller may talk to."""

from django.db.models import Prefetch
from rest_framework import serializers, viewsets

from agents.models import Agent, AgentTool
from agents.selectors import agents_usable_by


class AgentToolSerializer(serializers.Serializer):
    name = serializers.CharField(source="tool.name")
    description = serializers.CharField(source="tool.description")
    requires_approval = serializers.SerializerMethodField()

    def get_requires_approval(self, link: AgentTool) -> bool:
        if link.approval == AgentTool.Approval.INHERIT:
            return link.tool.requires_approval
        return link.approval == AgentTool.Approval.ALWAYS


class AgentSerializer(serializers.ModelSerializer):
    tools = AgentToolSerializer(source="enabled_tools", many=True, read_only=True)

    class Meta:
        model = Agent
        fields = ["slug", "name", "description", "concurrent_messages", "max_iterations", "tools"]


class AgentViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = AgentSerializer
    lookup_field = "slug"
    lookup_value_regex = "[-a-zA-Z0-9_]+"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, only the model
            return Agent.objects.none()
        tools = AgentTool.objects.filter(enabled=True, tool__is_active=True).select_related("tool").order_by("tool__name")
        return agents_usable_by(user=self.request.user).order_by("slug").prefetch_related(
            Prefetch("agent_tools", queryset=tools, to_attr="enabled_tools")
        )
