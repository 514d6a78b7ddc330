"""The site's front door: `/` lists the pages a visitor can open (sign-in happens on each)."""

from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from console.navigation import OperatorLink, operator_links
from platform_site.http_methods import require_GET


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
    return render(request, "console/home.html", {"links": _entry_links(request.user)})
