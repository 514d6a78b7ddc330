from django.contrib.auth import views as auth_views
from django.urls import path

from console.approvals import views
from platform_site.login_throttle import ThrottledAuthenticationForm

app_name = "approvals"

urlpatterns = [
    path("", views.approval_queue, name="queue"),
    path("poll/", views.approval_poll, name="poll"),
    path("history/", views.approval_history, name="history"),
    path("<int:pk>/", views.approval_detail, name="detail"),
    path("<int:pk>/decision/", views.approval_decision, name="decision"),
    path("<int:pk>/preview/", views.approval_preview, name="preview"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="approvals/login.html",
            authentication_form=ThrottledAuthenticationForm,
            redirect_authenticated_user=True,
            next_page="approvals:queue",
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="approvals:login"), name="logout"),
]
