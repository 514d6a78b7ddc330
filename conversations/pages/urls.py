from django.contrib.auth import views as auth_views
from django.urls import path

from conversations.pages import approval_views
from platform_site.login_throttle import ThrottledAuthenticationForm

app_name = "approvals"

urlpatterns = [
    path("", approval_views.approval_queue, name="queue"),
    path("poll/", approval_views.approval_poll, name="poll"),
    path("history/", approval_views.approval_history, name="history"),
    path("<int:pk>/", approval_views.approval_detail, name="detail"),
    path("<int:pk>/decision/", approval_views.approval_decision, name="decision"),
    path("<int:pk>/preview/", approval_views.approval_preview, name="preview"),
    path("login/", auth_views.LoginView.as_view(template_name="approvals/login.html",
                                                authentication_form=ThrottledAuthenticationForm,
                                                redirect_authenticated_user=True,
                                                next_page="approvals:queue"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="approvals:login"), name="logout"),
]
