"""The operator's download of an attachment (linked from the attachment's admin page and, later,
the run timeline's chips): staff with the view permission on attachments, in the workspace they
act in, by the rule every way in asks (attachments.selectors: another workspace's or, without
the permission to read everyone's conversations, another owner's is a 404)."""

from django.http import Http404

from attachments.permissions import VIEW_PERMISSION
from attachments.responses import attachment_response
from attachments.selectors import attachment_for
from attachments.services import AttachmentMissing
from console.monitoring.views import operator_required
from platform_site.http_methods import require_GET


@require_GET
@operator_required(VIEW_PERMISSION)
def attachment_download(request, attachment_id):
    attachment = attachment_for(user=request.user, attachment_id=attachment_id)
    if attachment is None:
        raise Http404
    try:
        return attachment_response(attachment)
    except AttachmentMissing:
        raise Http404 from None
