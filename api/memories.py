"""An end user's long-term memories: GET /api/v1/end-users/{end_user}/memories/ lists them and
DELETE /api/v1/end-users/{end_user}/memories/{id}/ deletes one (its change row says the API did,
and who). Only the caller's own end user's: another token owner's end user of the same id is
another person (docs/memory.md)."""

from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import agent_usable_by
from api.common import ErrorSerializer
from api.end_users import END_USER_PARAMETER, end_user_from_path
from conversations.end_users import EndUser, end_user_q
from memory.channels import CHANNEL_PATTERN
from memory.models import Memory, MemoryChange
from memory.selectors import agent_memory_scope, end_user_memories
from memory.services import memory_delete
from workspaces.access import in_workspace, may_act_on_own


class MemorySerializer(serializers.ModelSerializer):
    class Meta:
        model = Memory
        fields = [
            "id",
            "scope",
            "channel",
            "kind",
            "statement",
            "source_run",
            "created_at",
            "updated_at",
            "last_used_at",
            "expires_at",
        ]


class MemoryFilterSerializer(serializers.Serializer):
    agent = serializers.SlugField(
        max_length=100, required=False, help_text="Only the memories this agent reads and writes (its slug)."
    )
    channel = serializers.RegexField(
        CHANNEL_PATTERN,
        max_length=80,
        required=False,
        allow_blank=True,
        help_text="Only the memories kept for one channel: empty for your own (the API, and the widgets and hooks "
        "that share theirs), widget:<id> or hook:<id> for a widget's or hook's own.",
    )


class EndUserMemoryList(generics.ListAPIView):
    serializer_class = MemorySerializer

    @extend_schema(
        operation_id="end_users_memories_list",
        parameters=[END_USER_PARAMETER, MemoryFilterSerializer],
        responses={200: MemorySerializer(many=True), 400: ErrorSerializer},
        summary="List an end user's memories",
        description="What your agents remember of this end user across conversations, newest first: each "
        "memory's statement, kind, channel, the run it came from, and when it was written, last used and expires. "
        "Memories are kept per channel that vouched for the end user: empty for your API and the widgets and hooks "
        "that share their end users' memory with it, `widget:<id>` or `hook:<id>` for one that does not; this list "
        "shows all of them. With ?agent=<slug>, only the memories that agent reads and writes (its memory space); "
        "with ?channel=, only one channel's. An id you never used lists nothing.",
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, only the model
            return Memory.objects.none()
        if not may_act_on_own(self.request.user, "memory.view_memory"):
            raise PermissionDenied(_("Your token may not read memories."))
        end_user = end_user_from_path(self.kwargs["end_user"])
        filters = MemoryFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        scope = None
        slug = filters.validated_data.get("agent")
        if slug:
            agent = agent_usable_by(user=self.request.user, slug=slug)
            if agent is None:
                raise serializers.ValidationError(
                    {"agent": [_("There is no agent %(slug)r that you may use.") % {"slug": slug}]}
                )
            scope = agent_memory_scope(agent=agent)
        channel = filters.validated_data.get("channel")
        # Only the workspace's: a space's name ("support") in another workspace is another space.
        memories = end_user_memories(person=EndUser(self.request.user.pk, end_user), scope=scope, channel=channel)
        return in_workspace(memories, self.request.user)


class EndUserMemoryDetail(APIView):
    @extend_schema(
        operation_id="end_users_memories_destroy",
        parameters=[END_USER_PARAMETER],
        request=None,
        responses={204: None, 400: ErrorSerializer, 404: ErrorSerializer},
        summary="Delete one of an end user's memories",
        description="Forgets one memory (no agent is shown it again); a change row records that the API deleted "
        "it and what it said. 404 when your end user has no memory of this id.",
    )
    def delete(self, request, end_user, pk):
        if not may_act_on_own(request.user, "memory.delete_memory"):
            raise PermissionDenied(_("Your token may not delete memories."))
        end_user = end_user_from_path(end_user)
        mine = Memory.objects.filter(end_user_q(EndUser(request.user.pk, end_user)), pk=pk)
        memory = in_workspace(mine, request.user).first()
        if memory is None:
            raise Http404
        try:
            memory_delete(memory=memory, changed_by=request.user, source=MemoryChange.Source.API)
        except Memory.DoesNotExist:  # deleted meanwhile
            raise Http404 from None
        return Response(status=status.HTTP_204_NO_CONTENT)
