"""The API docs pages: Swagger UI and ReDoc from the app's own static files, held to this origin.

The assets come from drf-spectacular-sidecar (settings: SPECTACULAR_SETTINGS), so the pages work
offline. ReDoc's bundle would still fetch its vendor's logo from a CDN on every visit; the
Content-Security-Policy below keeps both pages to this origin, so the browser never makes such a
request (the logo hides itself when it cannot load).
"""

from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        # Swagger UI is started by an inline script; both UIs set inline styles.
        "script-src 'self' 'unsafe-inline'",
        "style-src 'self' 'unsafe-inline'",
        # The stylesheets' icons are data: URLs; ReDoc's search runs in a worker made from a blob.
        "img-src 'self' data:",
        "font-src 'self' data:",
        "worker-src 'self' blob:",
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


class RedocView(_SameOriginOnly, SpectacularRedocView):
    # drf-spectacular's page links Google Fonts; ours does not.
    template_name = "api/redoc.html"
