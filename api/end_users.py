"""An end user's conversations and runs: GET /api/v1/end-users/{end_user}/conversations/ and
/runs/. The end user is the caller's own id for a person (Conversation.end_user), so only the
caller's conversations are listed, whoever the caller is: another token owner's end user of the
same id is another person, and staff who may read every conversation read them elsewhere."""

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers

from api.common import ErrorSerializer, NewestFirstCursorPagination
from api.conversations import ConversationSerializer
from api.runs import RunListSerializer
from conversations.end_users import EndUser, EndUserInvalid, end_user_clean, end_user_conversations, end_user_runs
from conversations.models import Conversation, Run
from conversations.selectors import run_children_rows
from knowledge.selectors import searches_prefetch
from workspaces.access import in_workspace

END_USER_PARAMETER = OpenApiParameter(
    "end_user",
    str,
    OpenApiParameter.PATH,
    description="Your id for the person, as you gave it when creating their conversations (URL-encoded).",
)


def end_user_from_path(value: str) -> str:
    """The end user id in the URL as ids are stored (conversations.end_users), or the 400 saying
    why no end user can have it."""
    try:
        end_user = end_user_clean(value)
    except EndUserInvalid as exc:
        raise serializers.ValidationError({"end_user": [str(exc)]}) from None
    if not end_user:
        raise serializers.ValidationError({"end_user": [serializers.CharField.default_error_messages["blank"]]})
    return end_user


class EndUserFilterSerializer(serializers.Serializer):
    agent = serializers.SlugField(max_length=100, required=False, help_text="Only this agent's (its slug).")


class _EndUserList(generics.ListAPIView):
    def end_user_and_agent(self) -> tuple[str, str | None]:
        """The path's end user and the ?agent= filter, or the 400 naming the bad one."""
        end_user = end_user_from_path(self.kwargs["end_user"])
        filters = EndUserFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        return end_user, filters.validated_data.get("agent")


class EndUserConversationList(_EndUserList):
    serializer_class = ConversationSerializer

    @extend_schema(
        operation_id="end_users_conversations_list",
        parameters=[END_USER_PARAMETER, EndUserFilterSerializer],
        responses={200: ConversationSerializer(many=True), 400: ErrorSerializer},
        summary="List an end user's conversations",
        description="Your conversations with this end user, newest first; with ?agent=<slug>, only that agent's. "
        "An id you never used lists nothing.",
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, only the model
            return Conversation.objects.none()
        end_user, agent = self.end_user_and_agent()
        conversations = end_user_conversations(person=EndUser(self.request.user.pk, end_user), agent_slug=agent)
        return in_workspace(conversations, self.request.user)


class EndUserRunList(_EndUserList):
    serializer_class = RunListSerializer
    pagination_class = NewestFirstCursorPagination  # as GET /runs/ pages

    @extend_schema(
        operation_id="end_users_runs_list",
        parameters=[END_USER_PARAMETER, EndUserFilterSerializer],
        responses={200: RunListSerializer(many=True), 400: ErrorSerializer},
        summary="List an end user's runs",
        description="The runs of your conversations with this end user, newest first, as GET /runs/ shows and "
        "pages them (by cursor): status, question and answer, tokens and cost. With ?agent=<slug>, only that agent's.",
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Run.objects.none()
        end_user, agent = self.end_user_and_agent()
        # What RunSerializer reads of each run, as GET /runs/ reads it.
        person = EndUser(self.request.user.pk, end_user)
        runs = in_workspace(end_user_runs(person=person, reader=self.request.user, agent_slug=agent), self.request.user)
        return runs.prefetch_related(searches_prefetch(), Prefetch("children", queryset=run_children_rows()))
