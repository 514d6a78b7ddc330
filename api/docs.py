"""The API docs page: Swagger UI from the app's own static files, held to this origin.

The assets come from drf-spectacular-sidecar (settings: SPECTACULAR_SETTINGS), so the page works
offline, and the Content-Security-Policy below keeps it to this origin. There is no ReDoc page:
its bundle always draws its vendor's logo from a CDN (no option turns it off), so the page asked
another origin on every visit. /api/redoc/ sends old links to the Swagger UI page.
"""

from django.shortcuts import redirect
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularSwaggerView

from platform_site.http_methods import require_GET

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        # Swagger UI is started by an inline script and sets inline styles.
        "script-src 'self' 'unsafe-inline'",
        "style-src 'self' 'unsafe-inline'",
        # The stylesheet's icons are data: URLs.
        "img-src 'self' data:",
        "font-src 'self' data:",
        "frame-ancestors 'self'",
    ]
)


class _SameOriginOnly:
    @extend_schema(exclude=True)  # as drf-spectacular marks its own: a page, not an API operation
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response


class SwaggerView(_SameOriginOnly, SpectacularSwaggerView):
    pass


@require_GET
def redoc_moved(request):
    """The former ReDoc page's address, kept for bookmarks."""
    return redirect("api-docs", permanent=True)
