from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from api import docs, openai_compat
from platform_site.favicon import favicon
from platform_site.health import health
from platform_site.login_throttle import ThrottledAdminAuthenticationForm

admin.site.login_form = ThrottledAdminAuthenticationForm

urlpatterns = [
    # The front door: links to the admin, the approval queue and the API docs.
    path("", include("console.urls")),
    # Single sign-on's start and callback (/oidc/...), and the admin's logout that also ends the
    # provider's session (workspaces.sso): before the admin's own URLs.
    path("", include("workspaces.sso_urls")),
    path("admin/", admin.site.urls),
    path("health/", health),
    path("favicon.ico", favicon),
    # Prometheus scrapes; bearer token or staff session (console.metrics).
    path("", include("console.metrics")),
    # The header's workspace switcher (POST /workspace/).
    path("", include("workspaces.urls")),
    path("monitor/", include("console.monitoring.urls")),
    path("api/v1/", include("api.urls")),
    path("approvals/", include("console.approvals.urls")),
    path("evals/", include("console.evals.urls")),
    path("reviews/", include("console.reviews.urls")),
    # The chat widget's script (/widget.js) and hosted page (/chat/<widget id>/).
    path("", include("widgets.urls")),
    # Chat services' callbacks to an agent's bot (/chatbots/<channel id>/).
    path("", include("chatbots.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", docs.SwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", docs.redoc_moved, name="api-redoc"),
    path("v1/chat/completions", openai_compat.chat_completions, name="openai-chat-completions"),
    path("v1/models", openai_compat.models, name="openai-models"),
]

handler404 = "platform_site.api_errors.not_found"
handler500 = "platform_site.api_errors.server_error"
