"""/api/v1/widget/{widget_id}/…: the chat widget's API (widgets/static/widgets/widget.js).

No API token: the end-user token the application's backend signed with the widget's secret is
the authentication (widgets.tokens), sent as `Authorization: Bearer <token>`. An unknown widget,
a disabled one and one whose agent is inactive are the same 404. Pages of other sites call it
from the browser, so each answer carries CORS headers for an origin the widget allows, and a
request from any other origin is a 403 (a request with no Origin is not a browser's cross-site
call, and the token still decides). Every conversation and run is narrowed to the widget and
the token's end user; docs/widget.md describes the whole."""

from django.http import Http404
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from api.async_auth import AsyncApiError
from api.common import ErrorSerializer
from api.conversations import MessageCreateSerializer
from api.events import last_event_id, run_events_response
from api.throttles import ApiUserThrottle, WidgetThrottle
from attachments.parts import part_of
from attachments.responses import attachment_response
from attachments.selectors import attachment_for, attachments_named
from attachments.services import AttachmentMissing, attachment_store
from attachments.sniff import AttachmentRefused
from conversations.models import Conversation, RunTrigger
from engine.admission import AgentOutsideWorkspace, ConversationBusy, message_submit
from platform_site.api_errors import ApiConflict, RequestTooLarge
from platform_site.asyncdb import db
from platform_site.http_methods import require_GET
from widgets.origins import origin_allowed
from widgets.services import (
    widget_conversation_open,
    widget_conversation_state,
    widget_conversations,
    widget_public,
    widget_runs,
    widget_usable,
)
from widgets.tokens import TokenRefused, end_user_token_verify
from workspaces.access import Binding, workspace_bind

PREFLIGHT_MAX_AGE = 600


class WidgetUnauthorized(exceptions.APIException):
    # Not DRF's AuthenticationFailed: with no authentication class, DRF would turn that into a 403.
    status_code = status.HTTP_401_UNAUTHORIZED
    default_code = "widget_token"


class OriginRefused(Exception):
    pass


def _cors_origin(request, widget) -> str | None:
    """The origin to name in Access-Control-Allow-Origin, or None when the request has no Origin
    (a server's call; the token still decides). The widget's own hosted page (/chat/<id>/) is on
    this site, so this site's origin is always allowed."""
    origin = request.headers.get("Origin")
    if origin is None:
        return None
    own = f"{request.scheme}://{request.get_host()}"
    if origin == own or origin_allowed(allowed_origins=widget.allowed_origins, origin=origin):
        return origin
    raise OriginRefused


def _end_user(widget, token: str) -> str:
    try:
        return end_user_token_verify(widget=widget, token=token)
    except TokenRefused as exc:
        if exc.status == status.HTTP_403_FORBIDDEN:
            raise exceptions.PermissionDenied(exc.message) from None
        raise WidgetUnauthorized(exc.message) from None


def _bearer(request) -> str:
    scheme, _space, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class WidgetView(APIView):
    """Finds the widget, checks the origin and, except for a preflight, the end-user token."""

    authentication_classes = []
    permission_classes = [AllowAny]
    # Per address, as every API request is, and per widget.
    throttle_classes = [ApiUserThrottle, WidgetThrottle]
    cors_origin = None

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.widget = widget_usable(widget_id=kwargs["widget_id"])
        if self.widget is None:
            raise Http404
        try:
            self.cors_origin = _cors_origin(request, self.widget)
        except OriginRefused:
            raise exceptions.PermissionDenied(_("This widget may not be embedded on the page's site.")) from None
        if request.method != "OPTIONS":
            self.end_user = _end_user(self.widget, _bearer(request))

    def options(self, request, *args, **kwargs):
        """The CORS preflight: the browser asks before a POST with a JSON body and a token."""
        headers = {
            "Access-Control-Allow-Methods": ", ".join(m for m in self.allowed_methods if m != "OPTIONS"),
            "Access-Control-Allow-Headers": "Authorization, Content-Type",
            "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE),
        }
        return Response(status=status.HTTP_204_NO_CONTENT, headers=headers)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        # On errors too: the widget reads the message of a 401 or a 429 to show it.
        if self.cors_origin:
            response["Access-Control-Allow-Origin"] = self.cors_origin
            response["Access-Control-Expose-Headers"] = "Retry-After"
        patch_vary_headers(response, ["Origin"])
        return response

    def owner(self):
        """The widget's owner, acting in the widget's workspace (whatever the owner's own
        memberships): the identity its end users' attachments belong to."""
        owner = self.widget.owner
        workspace_bind(owner, Binding(workspace=self.widget.workspace, role=None))
        return owner

    def conversation(self, conversation_id) -> Conversation:
        conversation = widget_conversations(widget=self.widget, end_user=self.end_user).filter(pk=conversation_id)
        found = conversation.first()
        if found is None:
            raise Http404
        return found

    def answer(self, conversation, code=status.HTTP_200_OK) -> Response:
        state = widget_conversation_state(conversation=conversation)
        return Response({**state, "widget": widget_public(widget=self.widget)}, status=code)


class ConversationOpenSerializer(serializers.Serializer):
    conversation = serializers.UUIDField(
        required=False, help_text="The conversation the widget kept from an earlier page; omitted: a new one."
    )


class WidgetMessageSerializer(serializers.Serializer):
    content = serializers.CharField(trim_whitespace=False, allow_blank=True)
    attachments = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        default=list,
        help_text="Ids of attachments the end user uploaded through this widget (…/attachments/), in order.",
    )

    def validate_content(self, content: str) -> str:
        # Blank only with attachments (validate): a photo may say it all.
        return MessageCreateSerializer.validate_content(self, content) if content.strip() else content

    def validate(self, data):
        if not data["content"].strip() and not data["attachments"]:
            raise serializers.ValidationError({"content": [_("This field may not be blank.")]})
        return data


class WidgetUploadSerializer(serializers.Serializer):
    file = serializers.FileField(allow_empty_file=True, help_text="An image, a document, text or audio.")


def _refusal(exc: AttachmentRefused, field: str) -> exceptions.APIException:
    if exc.code == "size":
        return RequestTooLarge(str(exc))
    return serializers.ValidationError({field: [str(exc)]}, code=exc.code)


class WidgetConversationsView(WidgetView):
    @extend_schema(
        tags=["widget"],
        operation_id="widget_conversation_open",
        summary="Open the end user's conversation",
        description="With `conversation`: that conversation again, if it is the token's end user's through this "
        "widget (else 404). Without: a new one (201). Answers its messages and the widget's title, greeting "
        "and language. Authorization: Bearer <end-user token>.",
        request=ConversationOpenSerializer,
        responses={200: None, 201: None, 401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    )
    def post(self, request, widget_id):
        serializer = ConversationOpenSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            conversation, created = widget_conversation_open(
                widget=self.widget,
                end_user=self.end_user,
                conversation_id=serializer.validated_data.get("conversation"),
            )
        except (Conversation.DoesNotExist, AgentOutsideWorkspace):
            raise Http404 from None
        return self.answer(conversation, status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class WidgetConversationView(WidgetView):
    @extend_schema(
        tags=["widget"],
        operation_id="widget_conversation_read",
        summary="Read the end user's conversation",
        description="Its user and assistant messages in order, the run still answering if any, and the widget's "
        "title, greeting and language; 404 unless it is the token's end user's through this widget.",
        responses={200: None, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request, widget_id, conversation_id):
        return self.answer(self.conversation(conversation_id))


class WidgetMessagesView(WidgetView):
    @extend_schema(
        tags=["widget"],
        operation_id="widget_message_send",
        summary="Send the end user's message",
        description="Starts the run that answers it (202 with the run's id); follow it at .../runs/{run}/events/. "
        "The agent's limits per end user apply: 429 with Retry-After.",
        request=WidgetMessageSerializer,
        responses={202: None, 400: ErrorSerializer, 401: ErrorSerializer, 409: ErrorSerializer, 429: ErrorSerializer},
    )
    def post(self, request, widget_id, conversation_id):
        conversation = self.conversation(conversation_id)
        serializer = WidgetMessageSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        named = serializer.validated_data["attachments"]
        # The agent's limits per end user are admission's, as on every other way in.
        try:
            # A text message reads nothing more (the owner's workspace binding costs a read).
            attachments = (
                attachments_named(user=self.owner(), attachment_ids=named, end_user=self.end_user) if named else ()
            )
            submission = message_submit(
                conversation=conversation,
                content=serializer.validated_data["content"],
                user=self.widget.owner,
                trigger=RunTrigger.WIDGET,
                workspace_id=self.widget.workspace_id,
                attachments=attachments,
            )
        except AttachmentRefused as exc:
            raise _refusal(exc, "attachments") from None
        except AgentOutsideWorkspace:
            raise Http404 from None
        except ConversationBusy:
            raise ApiConflict(_("The agent is still answering the last message; wait for its answer.")) from None
        run = submission.run
        return Response({"run": str(run.pk), "status": run.status}, status=status.HTTP_202_ACCEPTED)


class WidgetAttachmentsView(WidgetView):
    parser_classes = [MultiPartParser]

    @extend_schema(
        tags=["widget"],
        operation_id="widget_attachment_upload",
        summary="Upload the end user's attachment",
        description="One file (multipart, field `file`) for the end user's next message to name in `attachments`. "
        "Its type is read from its bytes; an image is re-encoded without its metadata. 201 with its id, kind, "
        "media type, size and dimensions or duration; 400 when refused (empty, damaged, of an unknown or "
        "mismatched type, past the workspace's quota), 413 past the size limit.",
        request={"multipart/form-data": WidgetUploadSerializer},
        responses={201: None, 400: ErrorSerializer, 401: ErrorSerializer, 413: ErrorSerializer},
    )
    def post(self, request, widget_id):
        if len(request.FILES) != 1 or len(request.FILES.getlist("file")) != 1:
            raise serializers.ValidationError({"file": [_("Send exactly one file, in the field `file`.")]})
        serializer = WidgetUploadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        upload = serializer.validated_data["file"]
        owner = self.owner()
        try:
            attachment = attachment_store(
                workspace=self.widget.workspace,
                uploaded_by=owner,
                owner=owner,
                end_user=self.end_user,
                data=upload,
                name=upload.name or "",
            )
        except AttachmentRefused as exc:
            raise _refusal(exc, "file") from None
        return Response({"id": str(attachment.pk), **part_of(attachment)}, status=status.HTTP_201_CREATED)


class WidgetAttachmentContentView(WidgetView):
    @extend_schema(
        tags=["widget"],
        operation_id="widget_attachment_content",
        summary="Download the end user's attachment",
        description="The bytes of an attachment of the token's end user through this widget (else 404), as a "
        "download (Content-Disposition: attachment, X-Content-Type-Options: nosniff); the widget shows an "
        "image's as its thumbnail.",
        responses={(200, "application/octet-stream"): None, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request, widget_id, attachment_id):
        attachment = attachment_for(user=self.owner(), attachment_id=attachment_id, end_user=self.end_user)
        if attachment is None:
            raise Http404
        try:
            return attachment_response(attachment)
        except AttachmentMissing:
            raise Http404 from None


def _stream_run(request, widget_id, run_id) -> tuple[dict, str | None]:
    """The run to stream and the origin to allow, or the AsyncApiError to answer."""
    widget = widget_usable(widget_id=widget_id)
    if widget is None:
        raise AsyncApiError(404, _("Not found."))
    try:
        origin = _cors_origin(request, widget)
    except OriginRefused:
        raise AsyncApiError(403, _("This widget may not be embedded on the page's site.")) from None
    try:
        end_user = end_user_token_verify(widget=widget, token=request.GET.get("token", ""))
    except TokenRefused as exc:
        raise AsyncApiError(exc.status, exc.message, headers=_allow(origin)) from None
    run = widget_runs(widget=widget, end_user=end_user).filter(pk=run_id).values("pk", "status", "event_seq").first()
    if run is None:
        raise AsyncApiError(404, _("Not found."), headers=_allow(origin))
    return run, origin


def _allow(origin: str | None) -> dict:
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"} if origin else {"Vary": "Origin"}


@require_GET
async def widget_run_events(request, widget_id, run_id):
    """The run's events as api.events streams them. The token comes as ?token=, not a header:
    a browser's EventSource cannot send headers. It is short-lived (widgets.tokens) for this reason."""
    try:
        after = last_event_id(request)
        run, origin = await db(_stream_run, request, widget_id, run_id)
    except AsyncApiError as exc:
        return exc.response()
    response = run_events_response(run, after=after)
    for name, value in _allow(origin).items():
        response[name] = value
    return response
