"""An attachment's download, the same for the API and the console: always as a file to save
(Content-Disposition: attachment), never rendered by the browser (nosniff, a sandboxing CSP),
with the sniffed media type, which is never markup (attachments.sniff refuses HTML and SVG)."""

from django.http import FileResponse

from attachments.models import Attachment
from attachments.services import attachment_open
from attachments.sniff import EXTENSIONS


def download_name(attachment: Attachment) -> str:
    if attachment.name:
        return attachment.name
    extension = sorted(EXTENSIONS.get(attachment.media_type, {"bin"}))[0]
    return f"{attachment.pk}.{extension}"


def attachment_response(attachment: Attachment) -> FileResponse:
    """The bytes as a download (AttachmentMissing if the storage lost them)."""
    handle = attachment_open(attachment=attachment)
    content_type = attachment.media_type
    if content_type.startswith("text/"):
        content_type += "; charset=utf-8"
    response = FileResponse(handle, as_attachment=True, filename=download_name(attachment), content_type=content_type)
    response["Content-Length"] = str(attachment.size)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, no-store"
    return response
