"""The site's front door: `/` lists the pages a visitor can open (sign-in happens on each),
and the language switcher every page shows."""

from django.conf import settings
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.i18n import set_language

from console.navigation import OperatorLink, agent_links, operator_links
from platform_site.error_responses import error_json
from platform_site.http_methods import require_GET, require_POST


def _entry_links(user) -> list[OperatorLink]:
    if not user.is_authenticated:
        # Each of these asks for a sign-in and then shows what the account may see.
        return [
            OperatorLink("admin", _("Admin"), reverse("admin:index"), _("Operators: configuration, runs, monitoring.")),
            OperatorLink(
                "approvals", _("Approval queue"), reverse("approvals:queue"), _("Approvers: decide tool calls.")
            ),
            OperatorLink("api-docs", _("API docs"), reverse("api-docs"), _("The REST API for applications.")),
        ]
    links = operator_links(user)
    if user.is_staff:
        admin = OperatorLink(
            "admin", _("Admin"), reverse("admin:index"), _("Models, agents, tools, runs and audit rows.")
        )
        links.insert(0, admin)
    return links


@require_GET
def home(request):
    return render(
        request, "console/home.html", {"links": _entry_links(request.user), "agents": agent_links(request.user)}
    )


@require_POST
def language_set(request):
    """Django's set_language (the choice is kept in a cookie and the session, then back to the
    page), refusing a language the site does not offer instead of silently ignoring it."""
    if request.POST.get("language") not in dict(settings.LANGUAGES):
        choices = ", ".join(code for code, _name in settings.LANGUAGES)
        return error_json(
            request,
            400,
            _("Choose one of the languages offered: %(choices)s.") % {"choices": choices},
            code="invalid_language",
        )
    return set_language(request)
