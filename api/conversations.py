"""Conversations and the messages that start runs."""

import json

from django.conf import settings
from django.db.models import Prefetch
from django.http import Http404
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from agents.releases import DRAFT, PUBLISHED, UnknownVersion
from agents.run_choices import RunChoiceRefused, run_choice_check
from api.common import (
    ErrorSerializer,
    IdempotencyKeyMismatch,
    JSONInputField,
    agent_named,
    reject_nul,
    runs_start_check,
)
from api.message_attachments import (
    AttachmentPartSerializer,
    AttachmentsField,
    message_attachments,
    parts_out,
)
from api.runs import RunDetailSerializer
from api.throttles import ApiUserThrottle, RunStartThrottle
from attachments.sniff import AttachmentRefused
from conversations.end_users import END_USER_MAX_CHARS, EndUserInvalid, end_user_clean
from conversations.models import Conversation, Message, Run, RunTrigger
from conversations.run_labels import (
    MAX_METADATA_KEYS,
    MAX_TAGS,
    METADATA_KEY_MAX_CHARS,
    METADATA_VALUE_MAX_CHARS,
    TAG_MAX_CHARS,
    LabelsInvalid,
    metadata_clean,
    tags_clean,
)
from conversations.selectors import conversation_for_post, conversations_visible_to, runs_visible_to
from conversations.services import conversation_create, conversation_update
from engine.admission import ConversationBusy, IdempotencyKeyReused, message_submit
from platform_site.api_errors import ApiConflict

METADATA_MAX_BYTES = 16 * 1024
IDEMPOTENCY_KEY_MAX_CHARS = 200


class MessageSerializer(serializers.ModelSerializer):
    attachments = serializers.SerializerMethodField(
        help_text="The images, files and audio clips the message carries after its text, in order."
    )

    class Meta:
        model = Message
        fields = ["order", "role", "content", "attachments", "tool_calls", "tool_call_id", "name", "run", "created_at"]

    @extend_schema_field(AttachmentPartSerializer(many=True))
    def get_attachments(self, message: Message) -> list[dict]:
        return parts_out(message.parts, self.context["request"])


class RunBriefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Run
        fields = ["id", "status", "stop_reason", "created_at", "finished_at"]


class ConversationSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Conversation
        fields = ["id", "agent", "end_user", "title", "metadata", "created_at"]


class ConversationDetailSerializer(ConversationSerializer):
    messages = MessageSerializer(many=True, read_only=True)
    runs = RunBriefSerializer(many=True, read_only=True)

    class Meta(ConversationSerializer.Meta):
        fields = ConversationSerializer.Meta.fields + ["messages", "runs"]


def _metadata_checked(metadata):
    if not isinstance(metadata, dict):
        raise serializers.ValidationError(_("Must be a JSON object."))
    reject_nul(metadata)
    if len(json.dumps(metadata, ensure_ascii=False).encode()) > METADATA_MAX_BYTES:
        raise serializers.ValidationError(_("Must be at most %(count)s bytes as JSON.") % {"count": METADATA_MAX_BYTES})
    return metadata


class ConversationCreateSerializer(serializers.Serializer):
    agent = serializers.CharField(max_length=100, help_text="Slug of an agent from GET /api/v1/agents/.")
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    metadata = JSONInputField(required=False, default=dict, help_text="Any JSON object, up to 16 KiB.")
    end_user = serializers.CharField(
        max_length=END_USER_MAX_CHARS,
        required=False,
        allow_blank=True,
        default="",
        help_text="Your own id for the person this conversation serves, up to %d printable characters "
        "(surrounding spaces are dropped). The agent's limits per end user, its long-term memory and the "
        "end-users endpoints go by it. It cannot change later." % END_USER_MAX_CHARS,
    )

    def validate_agent(self, slug: str):
        return agent_named(user=self.context["request"].user, slug=slug)

    def validate_metadata(self, metadata):
        return _metadata_checked(metadata)

    def validate_end_user(self, end_user: str) -> str:
        try:
            return end_user_clean(end_user)
        except EndUserInvalid as exc:
            raise serializers.ValidationError(str(exc)) from None


class ConversationUpdateSerializer(serializers.Serializer):
    title = serializers.CharField(max_length=200, required=False, allow_blank=True)
    metadata = JSONInputField(required=False, help_text="Any JSON object, up to 16 KiB; replaces the old one.")

    # A conversation's agent and end user are fixed at its creation: memory, limits and the
    # record of who was served go by them, so a change is refused rather than ignored.
    FIXED = {
        "agent": gettext_lazy("A conversation's agent cannot change; start a new conversation with the other agent."),
        "end_user": gettext_lazy(
            "A conversation's end user cannot change; start a new conversation for the other end user."
        ),
    }

    def validate(self, attrs):
        fixed = {name: [str(message)] for name, message in self.FIXED.items() if name in self.initial_data}
        if fixed:
            raise serializers.ValidationError(fixed)
        return attrs

    def validate_metadata(self, metadata):
        return _metadata_checked(metadata)


class _StringField(serializers.CharField):
    """A string, not a number turned into one: /v1's metadata refuses numbers too."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


def _labels_checked(clean, value):
    try:
        return clean(value)
    except LabelsInvalid as exc:
        raise serializers.ValidationError(exc.message) from None


class RunLabelsSerializer(serializers.Serializer):
    """Tags and metadata for the run a request starts (conversations.run_labels): the runs list
    filters by them (?tag=, ?meta=key:value)."""

    tags = serializers.ListField(
        child=_StringField(max_length=TAG_MAX_CHARS, trim_whitespace=False),
        required=False,
        max_length=MAX_TAGS,
        help_text=f"Up to {MAX_TAGS} tags of at most {TAG_MAX_CHARS} characters: letters, digits and _ - . / "
        "(starting with a letter or digit).",
    )
    metadata = serializers.DictField(
        child=_StringField(max_length=METADATA_VALUE_MAX_CHARS, allow_blank=True, trim_whitespace=False),
        required=False,
        help_text=f"Up to {MAX_METADATA_KEYS} string pairs, for the run: keys of at most {METADATA_KEY_MAX_CHARS} "
        f"characters without a colon, values of at most {METADATA_VALUE_MAX_CHARS}.",
    )

    def validate_tags(self, tags):
        return _labels_checked(tags_clean, tags)

    def validate_metadata(self, metadata):
        return _labels_checked(metadata_clean, metadata)


class MessageCreateSerializer(RunLabelsSerializer):
    content = serializers.CharField(
        trim_whitespace=False,
        required=False,
        allow_blank=True,
        default="",
        help_text="The user's message; may be empty when attachments are sent.",
    )
    attachments = AttachmentsField(
        required=False,
        help_text="Ids of attachments uploaded for the conversation's end user (POST /api/v1/attachments/), sent "
        "after the text in this order; in multipart form data, files too. At most AGENTRY_ATTACHMENTS_PER_MESSAGE.",
    )
    version = serializers.CharField(
        required=False,
        max_length=20,
        help_text='Run this version instead of the released one, for testing: "draft", "published" or a version '
        "number. Needs the permission agents.test_agent_version.",
    )

    def validate_version(self, version: str) -> str | int:
        if version in (DRAFT, PUBLISHED):
            return version
        if version.isascii() and version.isdigit() and 0 < int(version) < 2**31:
            return int(version)
        raise serializers.ValidationError(_('Must be "draft", "published" or a version number.'))

    def validate(self, attrs):
        if not attrs.get("attachments") and not attrs["content"].strip():
            key = "blank" if "content" in self.initial_data else "required"
            raise serializers.ValidationError({"content": [self.fields["content"].error_messages[key]]}, code=key)
        return attrs

    def validate_content(self, content: str) -> str:
        limit = settings.AGENTRY_MESSAGE_MAX_CHARS
        if len(content) > limit:
            raise serializers.ValidationError(
                _("Ensure this field has no more than %(limit)s characters.") % {"limit": limit}
            )
        return content


class MessageCreateFormSerializer(MessageCreateSerializer):
    """The same message as multipart form data: its files stored and sent in order."""

    attachments = serializers.ListField(
        child=serializers.FileField(),
        required=False,
        help_text="Files to send after the text, in order (each read as POST /api/v1/attachments/ reads one), "
        "and ids of uploaded attachments.",
    )


def _idempotency_key(request) -> str:
    key = request.headers.get("Idempotency-Key", "")
    if len(key) > IDEMPOTENCY_KEY_MAX_CHARS or not key.isprintable():
        raise serializers.ValidationError(
            {"Idempotency-Key": f"Must be at most {IDEMPOTENCY_KEY_MAX_CHARS} printable characters."}
        )
    return key


@extend_schema_view(
    list=extend_schema(
        summary="List your conversations",
        description="Conversations your token's user owns (staff with the permission see every user's), newest first.",
    ),
    retrieve=extend_schema(
        summary="Read a conversation",
        description="One conversation with its messages in order and the runs that answered them.",
    ),
)
class ConversationViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, only the model
            return Conversation.objects.none()
        conversations = conversations_visible_to(user=self.request.user).order_by("-created_at")
        if self.action == "retrieve":
            conversations = conversations.prefetch_related(
                Prefetch("messages", queryset=Message.objects.order_by("order")),
                Prefetch("runs", queryset=Run.objects.order_by("created_at")),
            )
        return conversations

    def get_object(self):
        if self.action != "messages":
            return super().get_object()
        # One read decides 404, 403 and 409: whether the user may still use the agent is asked
        # in the same statement; message_submit reads the agent itself, under its lock.
        conversation = conversation_for_post(user=self.request.user, conversation_id=self.kwargs["pk"])
        if conversation is None:
            raise Http404
        self.check_object_permissions(self.request, conversation)
        return conversation

    def get_serializer_class(self):
        return {
            "create": ConversationCreateSerializer,
            "retrieve": ConversationDetailSerializer,
            "messages": MessageCreateSerializer,
            "partial_update": ConversationUpdateSerializer,
        }.get(self.action, ConversationSerializer)

    @extend_schema(
        summary="Start a conversation with an agent",
        description="Creates an empty conversation with the agent named by its slug; post messages to it next.",
        examples=[
            OpenApiExample(
                "A conversation", value={"agent": "customer-service", "title": "Trip to Chengdu"}, request_only=True
            )
        ],
        request=ConversationCreateSerializer,
        responses={201: ConversationDetailSerializer, 400: ErrorSerializer},
    )
    def create(self, request, *args, **kwargs):
        runs_start_check(request.user)
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        conversation = conversation_create(owner=request.user, **serializer.validated_data)
        return Response(
            ConversationDetailSerializer(conversation, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        summary="Retitle a conversation",
        description="Changes a conversation's title or metadata. Its agent and its end user are fixed when it is "
        "created: a request naming either is a 400.",
        request=ConversationUpdateSerializer,
        responses={
            200: ConversationSerializer,
            400: ErrorSerializer,
            403: OpenApiResponse(ErrorSerializer, description="The conversation is another user's."),
        },
    )
    def partial_update(self, request, *args, **kwargs):
        conversation = self.get_object()
        if conversation.owner_id != request.user.pk:
            raise PermissionDenied(_("This conversation belongs to another user; you may read it but not change it."))
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        conversation = conversation_update(conversation=conversation, **serializer.validated_data)
        return Response(ConversationSerializer(conversation, context=self.get_serializer_context()).data)

    @extend_schema(
        request={"application/json": MessageCreateSerializer, "multipart/form-data": MessageCreateFormSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Retrying with the same key returns the run the first request created.",
            )
        ],
        responses={
            202: RunDetailSerializer,
            400: OpenApiResponse(
                ErrorSerializer,
                description="Bad input; or an attachment id not found for the conversation's end user, or a file "
                "refused (empty, damaged, a polyglot, markup, too many pixels, past the quota), or too many.",
            ),
            403: OpenApiResponse(
                ErrorSerializer,
                description="The conversation is another user's, or a version was asked for without the permission.",
            ),
            413: OpenApiResponse(ErrorSerializer, description="A file is larger than an attachment may be."),
            409: OpenApiResponse(ErrorSerializer, description="The agent rejects messages while a run is active."),
            422: OpenApiResponse(ErrorSerializer, description="The Idempotency-Key was used with other content."),
            429: OpenApiResponse(
                ErrorSerializer,
                description="Too many requests, or the conversation's end user reached one of the agent's limits per "
                "end user (messages per minute, tokens per day); Retry-After says when to try again.",
            ),
        },
        summary="Send a message and start a run",
        description="Posts a user message and starts the run that answers it (202 with the run, status "
        "`queued`); follow it with GET /runs/{id}/events/ (Server-Sent Events) or read GET /runs/{id}/ until it "
        "ends. Send an `Idempotency-Key` header to retry safely. Images, files and audio go in `attachments`: ids "
        "of uploads (POST /api/v1/attachments/ with the conversation's end user), or, as multipart form data, the "
        "files themselves; the text may then be empty.",
        examples=[
            OpenApiExample("A question", value={"content": "我在成都，明天天气如何？"}, request_only=True),
            OpenApiExample(
                "A question with tags and metadata",
                value={"content": "Where is my order?", "tags": ["support", "vip"], "metadata": {"customer": "acme"}},
                request_only=True,
            ),
            OpenApiExample(
                "A photo uploaded before",
                value={"content": "这个产品坏了，怎么办？", "attachments": ["0b9f6c1e-5a4d-4a8e-9c61-3f2d7e8a1b20"]},
                request_only=True,
            ),
        ],
    )
    @action(detail=True, methods=["post"], throttle_classes=[ApiUserThrottle, RunStartThrottle])
    def messages(self, request, pk=None):
        # Before the lookup: the same 403 whichever id, so it says nothing of the conversation.
        runs_start_check(request.user)
        conversation = self.get_object()
        if conversation.owner_id != request.user.pk:
            # Staff may be allowed to read other users' conversations, never to speak in them.
            raise PermissionDenied(_("This conversation belongs to another user; you may read it but not post in it."))
        stray = set(request.FILES) - {"attachments"}
        if stray:
            raise serializers.ValidationError(
                {sorted(stray)[0]: [_("Send files in the field `attachments`.")]}, code="attachments"
            )
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = serializer.validated_data.get("version")
        try:
            run_choice_check(user=request.user, agent_id=conversation.agent_id, version=version)
        except RunChoiceRefused as exc:
            raise PermissionDenied(str(exc)) from None
        key = _idempotency_key(request)
        if not conversation.agent_usable:
            raise ApiConflict(
                f"The agent {conversation.agent.slug!r} is not available any more: "
                "it was disabled or your access to it was removed."
            )
        # Files are stored before admission: one a busy conversation or a limit then refuses is
        # used by no message, and the daily sweep deletes it (attachments.retention).
        attachments = message_attachments(
            user=request.user, conversation=conversation, items=serializer.validated_data.get("attachments", ())
        )
        # The agent's limits per end user are admission's (AdmissionRefused: the 429 of
        # platform_site.api_errors).
        try:
            submission = message_submit(
                conversation=conversation,
                content=serializer.validated_data["content"],
                user=request.user,
                idempotency_key=key,
                version=version,
                trigger=RunTrigger.API,
                tags=serializer.validated_data.get("tags", ()),
                metadata=serializer.validated_data.get("metadata"),
                attachments=attachments,
            )
        except AttachmentRefused as exc:
            # Another identity's attachment (attachments.services.attachment_uses): not found.
            raise serializers.ValidationError({"attachments": [str(exc)]}, code=exc.code) from None
        except UnknownVersion as exc:
            raise serializers.ValidationError({"version": [str(exc)]}) from None
        except ConversationBusy as exc:
            raise ApiConflict(
                {
                    "detail": f"This conversation already has an active run ({exc.run.pk}, {exc.run.status}) and its "
                    "agent does not take a new message until it ends; wait for it or cancel it first.",
                    "active_run": str(exc.run.pk),
                }
            ) from None
        except IdempotencyKeyReused:
            raise IdempotencyKeyMismatch() from None
        run = submission.run
        headers = {"Location": reverse("run-detail", kwargs={"pk": run.pk})}
        if submission.replayed:
            headers["Idempotent-Replayed"] = "true"
            # A replayed run may have moved on since: read it as GET /runs/{id}/ would.
            run = runs_visible_to(user=request.user).get(pk=run.pk)
        # A new run is answered from memory: it is queued, with no output, as just written.
        data = RunDetailSerializer(run, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_202_ACCEPTED, headers=headers)
