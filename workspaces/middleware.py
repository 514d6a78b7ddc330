"""Which workspace a signed-in person's request acts in: the header switcher's choice, kept in
the session and checked against their memberships when first asked (workspaces.access), else
their first workspace. Token requests are bound by their token (api.auth)."""

from django.contrib.auth.middleware import get_user
from django.utils.functional import SimpleLazyObject

from platform_site.around_middleware import AroundMiddleware
from workspaces.access import session_attach


class CurrentWorkspaceMiddleware(AroundMiddleware):
    def around(self, request):
        if hasattr(request, "session") and hasattr(request, "user"):
            # Still lazy: a request that never looks at its user reads neither session nor
            # membership (static files, the health check, token calls without a cookie).
            request.user = SimpleLazyObject(lambda: session_attach(get_user(request), request.session))
        return super().around(request)
