"""The header's workspace switcher: the workspaces a person may act in, and where to go after
choosing one."""

from dataclasses import dataclass

from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _

from workspaces.access import binding_of, memberships_of
from workspaces.models import Workspace

# The switcher's value for a superuser's installation-wide view.
ALL = "all"


@dataclass(frozen=True)
class Choice:
    value: str
    label: str
    current: bool


def switch_choices(user) -> list[Choice]:
    """The person's workspaces (one read); a superuser also gets every workspace and "All
    workspaces" (installation-wide)."""
    if user is None or not user.is_authenticated:
        return []
    current = binding_of(user).workspace_id
    if user.is_superuser:
        workspaces = [(w.pk, w.name) for w in Workspace.objects.order_by("name")]
        choices = [Choice(ALL, str(_("All workspaces")), current is None)]
    else:
        workspaces = [(m.workspace_id, m.workspace.name) for m in memberships_of(user)]
        choices = []
    return choices + [Choice(str(pk), name, pk == current) for pk, name in workspaces]


def switch_target(request, target: str) -> str:
    """Where to go after switching: `target` if it is one of this site's pages and not a page of
    one object (which belongs to the workspace just left), else the admin's index."""
    fallback = reverse("admin:index")
    if not target or not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return fallback
    try:
        match = resolve(target.split("?", 1)[0].split("#", 1)[0])
    except Resolver404:
        return fallback
    # A change page, a run's timeline, an approval: the path names one object.
    if match.kwargs or match.args:
        return fallback
    return target
