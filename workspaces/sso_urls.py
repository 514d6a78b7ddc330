"""Single sign-on's URLs (workspaces.sso). The names are mozilla-django-oidc's, which it reverses."""

from django.urls import path

from workspaces import sso

urlpatterns = [
    path("oidc/authenticate/", sso.SignOnStartView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", sso.SignOnCallbackView.as_view(), name="oidc_authentication_callback"),
    path("admin/logout/", sso.SignOutView.as_view(), name="sign_on_logout"),
]
