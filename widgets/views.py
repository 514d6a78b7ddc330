"""The widget's script at /widget.js and the hosted chat page /chat/<widget id>/."""

from functools import cache
from pathlib import Path

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.clickjacking import xframe_options_sameorigin

from platform_site.http_methods import require_GET
from widgets.services import widget_usable

SCRIPT = Path(__file__).resolve().parent / "static" / "widgets" / "widget.js"
# Other sites' pages link to /widget.js for good, so it is served at this fixed address rather
# than under STATIC_URL; a short cache lets a release reach them within minutes.
SCRIPT_MAX_AGE = 300


@cache
def _script() -> bytes:
    return SCRIPT.read_bytes()


@require_GET
def widget_script(request):
    response = HttpResponse(_script(), content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = f"public, max-age={SCRIPT_MAX_AGE}"
    return response


@require_GET
@xframe_options_sameorigin  # framed by the widget's admin page (its preview), by no other site
def chat_page(request, widget_id):
    """The same chat for a team with no page of its own: its backend signs an end-user token and
    links the end user to /chat/<widget id>/?token=<token>; the API checks the token."""
    widget = widget_usable(widget_id=widget_id)
    if widget is None:
        raise Http404
    context = {"widget": widget, "token": request.GET.get("token", ""), "title": widget.title or widget.agent.name}
    return render(request, "widgets/chat.html", context)
