"""POST /workspace/: the header switcher's choice, kept in the session (workspaces.middleware)."""

from django.contrib.auth.views import redirect_to_login
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse

from platform_site.http_methods import require_POST
from workspaces.access import SESSION_KEY, binding_for
from workspaces.switcher import ALL, switch_target


@require_POST
def workspace_switch(request):
    user = request.user
    if not user.is_authenticated:
        return redirect_to_login(request.POST.get("next") or "/", reverse("admin:login"))
    chosen = request.POST.get("workspace", "")
    if chosen == ALL and user.is_superuser:
        request.session.pop(SESSION_KEY, None)
    else:
        try:
            workspace_id = int(chosen)
        except ValueError:
            raise Http404("no such workspace") from None
        # Not a member (or no such workspace): the same 404, which confirms nothing.
        if binding_for(user, workspace_id).workspace is None:
            raise Http404("no such workspace")
        request.session[SESSION_KEY] = workspace_id
    return redirect(switch_target(request, request.POST.get("next", "")))
