"""Attachments: POST /api/v1/attachments/ uploads one (multipart, field `file`) and answers with
the reference that messages name; GET /api/v1/attachments/{id}/ reads its record and
GET /api/v1/attachments/{id}/content/ downloads its bytes. Who may read one is
attachments.selectors' rule (another workspace's, owner's or end user's is a 404)."""

from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from api.common import ErrorSerializer, runs_start_check
from attachments.models import Attachment
from attachments.responses import attachment_response
from attachments.selectors import attachment_for
from attachments.services import AttachmentMissing, attachment_store
from attachments.sniff import AttachmentRefused
from conversations.end_users import END_USER_MAX_CHARS, EndUserInvalid, end_user_clean
from platform_site.api_errors import RequestTooLarge
from workspaces.access import binding_of, may_act_on_own


class AttachmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attachment
        fields = [
            "id",
            "kind",
            "media_type",
            "size",
            "sha256",
            "width",
            "height",
            "duration_ms",
            "name",
            "end_user",
            "created_at",
        ]
        read_only_fields = fields


class AttachmentUploadSerializer(serializers.Serializer):
    file = serializers.FileField(
        allow_empty_file=True, help_text="The file (an image, a document, text or audio); its type is read from it."
    )
    end_user = serializers.CharField(
        max_length=END_USER_MAX_CHARS,
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="Your id for the person it is from, as on their conversations: only their messages may use it.",
    )

    def validate_end_user(self, end_user: str) -> str:
        try:
            return end_user_clean(end_user)
        except EndUserInvalid as exc:
            raise serializers.ValidationError(str(exc)) from None


def _readable(request, attachment_id) -> Attachment:
    if not may_act_on_own(request.user, "conversations.view_conversation"):
        raise exceptions.PermissionDenied(_("Your token may not read conversations in this workspace."))
    attachment = attachment_for(user=request.user, attachment_id=attachment_id)
    if attachment is None:
        raise Http404
    return attachment


class AttachmentUploadView(APIView):
    parser_classes = [MultiPartParser]

    @extend_schema(
        operation_id="attachments_create",
        request={"multipart/form-data": AttachmentUploadSerializer},
        responses={
            201: AttachmentSerializer,
            400: OpenApiResponse(
                ErrorSerializer,
                description="Refused: empty, damaged, unknown or mismatched type, "
                "a polyglot, markup, too many pixels, or past the workspace's quota.",
            ),
            413: ErrorSerializer,
        },
        summary="Upload an attachment",
        description="Stores one file for your messages to name by its id. Its type is read from its bytes (the "
        "name's extension must agree); an image is re-encoded without its metadata (EXIF, GPS). The same bytes "
        "uploaded again for the same end user return the same attachment.",
    )
    def post(self, request):
        runs_start_check(request.user)
        workspace = binding_of(request.user).workspace
        if workspace is None:
            raise exceptions.PermissionDenied(_("Choose a workspace to upload attachments to."))
        if len(request.FILES) != 1 or len(request.FILES.getlist("file")) != 1:
            raise serializers.ValidationError({"file": [_("Send exactly one file, in the field `file`.")]})
        serializer = AttachmentUploadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        upload = serializer.validated_data["file"]
        try:
            attachment = attachment_store(
                workspace=workspace,
                uploaded_by=request.user,
                owner=request.user,
                end_user=serializer.validated_data["end_user"],
                data=upload,
                name=upload.name or "",
            )
        except AttachmentRefused as exc:
            if exc.code == "size":
                raise RequestTooLarge(str(exc)) from None
            raise serializers.ValidationError({"file": [str(exc)]}, code=exc.code) from None
        return Response(AttachmentSerializer(attachment).data, status=status.HTTP_201_CREATED)


class AttachmentDetailView(APIView):
    @extend_schema(
        operation_id="attachments_retrieve",
        responses={200: AttachmentSerializer, 404: ErrorSerializer},
        summary="Read an attachment's record",
        description="Its kind and media type (read from the bytes), size, SHA-256, dimensions or duration, name "
        "and end user; another workspace's, owner's or end user's attachment is a 404.",
    )
    def get(self, request, attachment_id):
        return Response(AttachmentSerializer(_readable(request, attachment_id)).data)


class AttachmentContentView(APIView):
    @extend_schema(
        operation_id="attachments_content",
        responses={
            (200, "application/octet-stream"): OpenApiResponse(description="The bytes, as a download."),
            404: ErrorSerializer,
        },
        summary="Download an attachment",
        description="Served as a download (Content-Disposition: attachment, X-Content-Type-Options: nosniff) with "
        "the type read from the bytes.",
    )
    def get(self, request, attachment_id):
        attachment = _readable(request, attachment_id)
        try:
            return attachment_response(attachment)
        except AttachmentMissing:
            raise Http404 from None
