"""Single sign-on: OpenID Connect's authorization code flow with PKCE (mozilla-django-oidc).

The provider is configured by AGENTRY_OIDC_* (platform_site/settings.py, docs/sso.md). A person
is found again by the provider's issuer and subject (SignOnIdentity), never by an email; the first
login makes the account. Every login sets the workspace memberships the groups claim maps to
(AGENTRY_OIDC_ROLE_MAP) and takes away the ones single sign-on gave that the claim no longer
gives; memberships an owner set by hand in other workspaces stay."""

import logging
import re
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core import checks
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.db import transaction
from django.http import Http404, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import absolutify, import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView, OIDCLogoutView

from workspaces.access import SESSION_KEY
from workspaces.membership import membership_set
from workspaces.models import Membership, SignOnIdentity, Workspace, workspace_slug_validator
from workspaces.roles import Role

logger = logging.getLogger(__name__)

# Strongest first: when two groups give one workspace, the person gets the stronger role.
ROLE_ORDER = (Role.OWNER, Role.BUILDER, Role.OPERATOR, Role.APPROVER, Role.VIEWER)
_USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")
_USERNAME_MAX = 150


# --- The mapping (pure) -----------------------------------------------------------------------


def role_map_parse(text: str) -> tuple[tuple[str, str, str], ...]:
    """AGENTRY_OIDC_ROLE_MAP, "group=workspace-slug:role,...", as (group, slug, role) in order.
    The custom role is not mappable: it means the person's own Django permissions."""
    entries = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        group, sep, target = item.rpartition("=")
        slug, colon, role = target.partition(":")
        slug, role, group = slug.strip(), role.strip(), group.strip()
        if not sep or not group or not colon or role not in ROLE_ORDER:
            raise ImproperlyConfigured(
                f"AGENTRY_OIDC_ROLE_MAP: {item!r} is not group=workspace-slug:role (roles: {', '.join(ROLE_ORDER)})"
            )
        try:
            workspace_slug_validator(slug)
        except Exception as exc:  # noqa: BLE001 - a ValidationError, said as configuration
            raise ImproperlyConfigured(f"AGENTRY_OIDC_ROLE_MAP: {slug!r} is not a workspace slug") from exc
        entries.append((group, slug, role))
    return tuple(entries)


def claimed_roles(claims: dict, *, groups_claim: str, role_map) -> dict[str, str]:
    """The workspaces (slug: role) a person's claims give, in the map's order. The claim may be a
    list of groups or one group."""
    groups = claims.get(groups_claim) or []
    if isinstance(groups, str):
        groups = [groups]
    held = {group for group in groups if isinstance(group, str)}
    roles: dict[str, str] = {}
    for group, slug, role in role_map:
        if group in held and (slug not in roles or ROLE_ORDER.index(role) < ROLE_ORDER.index(roles[slug])):
            roles[slug] = role
    return roles


def username_for(claims: dict, taken) -> str:
    """A new account's username: the claims' preferred_username, else email, else subject, cut
    to Django's allowed characters, with "-2", "-3", ... while `taken(name)` says it is in use."""
    raw = claims.get("preferred_username") or claims.get("email") or claims.get("sub") or "user"
    base = _USERNAME_UNSAFE.sub("", str(raw))[: _USERNAME_MAX - 8] or "user"
    candidate, number = base, 1
    while taken(candidate):
        number += 1
        candidate = f"{base}-{number}"
    return candidate


# --- The provider -----------------------------------------------------------------------------

# The mozilla-django-oidc setting, the discovery document's field, the AGENTRY_OIDC_* override.
_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": ("authorization_endpoint", "AGENTRY_OIDC_AUTHORIZATION_ENDPOINT"),
    "OIDC_OP_TOKEN_ENDPOINT": ("token_endpoint", "AGENTRY_OIDC_TOKEN_ENDPOINT"),
    "OIDC_OP_USER_ENDPOINT": ("userinfo_endpoint", "AGENTRY_OIDC_USERINFO_ENDPOINT"),
    "OIDC_OP_JWKS_ENDPOINT": ("jwks_uri", "AGENTRY_OIDC_JWKS_URI"),
    "OIDC_OP_END_SESSION_ENDPOINT": ("end_session_endpoint", "AGENTRY_OIDC_END_SESSION_ENDPOINT"),
}
_CLIENT = {
    "OIDC_RP_CLIENT_ID": "AGENTRY_OIDC_CLIENT_ID",
    "OIDC_RP_CLIENT_SECRET": "AGENTRY_OIDC_CLIENT_SECRET",
    "OIDC_RP_SCOPES": "AGENTRY_OIDC_SCOPES",
    "OIDC_RP_SIGN_ALGO": "AGENTRY_OIDC_SIGN_ALGO",
}
# Discovery documents by issuer: read once per process, when single sign-on is first used.
_discovered: dict[str, dict] = {}


def configured() -> bool:
    return bool(
        settings.AGENTRY_OIDC_CLIENT_ID
        and (settings.AGENTRY_OIDC_ISSUER or settings.AGENTRY_OIDC_AUTHORIZATION_ENDPOINT)
    )


def discovery(issuer: str) -> dict:
    """The issuer's /.well-known/openid-configuration (a failure is not kept: the next login
    tries again)."""
    if issuer not in _discovered:
        response = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        _discovered[issuer] = response.json()
    return _discovered[issuer]


def provider_setting(name: str, *default):
    """mozilla-django-oidc's settings: the provider's from AGENTRY_OIDC_* and discovery, its
    own from the settings module."""
    if name in _ENDPOINTS:
        field, override = _ENDPOINTS[name]
        value = getattr(settings, override)
        if not value and settings.AGENTRY_OIDC_ISSUER:
            value = discovery(settings.AGENTRY_OIDC_ISSUER).get(field)
        return value or (default[0] if default else None)
    if name in _CLIENT:
        return getattr(settings, _CLIENT[name])
    return import_from_settings(name, *default)


def issuer() -> str:
    return settings.AGENTRY_OIDC_ISSUER or provider_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")


def role_map():
    return role_map_parse(settings.AGENTRY_OIDC_ROLE_MAP)


def sign_on_check(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """At start (registered by workspaces.apps): a role map that cannot be read, a client with no
    provider, or local login off with no single sign-on to sign in with."""
    found = []
    try:
        role_map()
    except ImproperlyConfigured as exc:
        found.append(checks.Error(str(exc), id="workspaces.E001"))
    if settings.AGENTRY_OIDC_CLIENT_ID and not configured():
        found.append(
            checks.Warning(
                "AGENTRY_OIDC_CLIENT_ID is set without AGENTRY_OIDC_ISSUER or AGENTRY_OIDC_AUTHORIZATION_ENDPOINT: "
                "single sign-on is off.",
                id="workspaces.W001",
            )
        )
    if not settings.AGENTRY_LOCAL_LOGIN and not configured():
        found.append(
            checks.Warning(
                "AGENTRY_LOCAL_LOGIN is off and single sign-on is not configured: nobody can sign in.",
                hint="See docs/sso.md.",
                id="workspaces.W002",
            )
        )
    return found


# --- Accounts and memberships -----------------------------------------------------------------


def sign_on_sync(user, claims: dict) -> Workspace | None:
    """Set the memberships `claims` give (and only take away the ones single sign-on gave), make
    the account staff while it has a role somewhere; the first workspace the claims give, if any."""
    roles = claimed_roles(claims, groups_claim=settings.AGENTRY_OIDC_GROUPS_CLAIM, role_map=role_map())
    found = {workspace.slug: workspace for workspace in Workspace.objects.filter(slug__in=roles)}
    missing = sorted(set(roles) - set(found))
    if missing:
        logger.warning("single sign-on: AGENTRY_OIDC_ROLE_MAP names unknown workspaces %s", ", ".join(missing))
    workspaces = [found[slug] for slug in roles if slug in found]
    for workspace in workspaces:
        membership_set(user=user, workspace=workspace, role=roles[workspace.slug], from_sso=True)
    Membership.objects.filter(user=user, from_sso=True).exclude(workspace__in=workspaces).delete()
    by_hand = Membership.objects.filter(user=user, from_sso=False).exclude(role=Role.CUSTOM).exists()
    staff = user.is_superuser or bool(workspaces) or by_hand
    if user.is_staff != staff:
        user.is_staff = staff
        user.save(update_fields=["is_staff"])
    return workspaces[0] if workspaces else None


class SignOnBackend(OIDCAuthenticationBackend):
    """The callback's backend: finds (or makes) the person by issuer and subject, then syncs
    their memberships. Answers nothing while single sign-on is not configured."""

    get_settings = staticmethod(provider_setting)

    def __init__(self, *args, **kwargs):
        # Django builds every listed backend for each password login too: read the provider
        # (maybe over the network) only when a callback is really being answered.
        self.UserModel = get_user_model()

    def authenticate(self, request, **kwargs):
        if request is None or not configured() or "code" not in request.GET or "state" not in request.GET:
            return None
        super().__init__()
        return super().authenticate(request, **kwargs)

    def verify_token(self, token, **kwargs):
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud", settings.AGENTRY_OIDC_CLIENT_ID)
        audience = [audience] if isinstance(audience, str) else audience
        if settings.AGENTRY_OIDC_CLIENT_ID not in audience:
            raise SuspiciousOperation("ID token for another client")
        if settings.AGENTRY_OIDC_ISSUER and payload.get("iss", settings.AGENTRY_OIDC_ISSUER) != issuer():
            raise SuspiciousOperation("ID token from another issuer")
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        """The ID token's claims with the userinfo endpoint's on top (a provider may put the
        groups in either)."""
        if not self.OIDC_OP_USER_ENDPOINT:
            return dict(payload)
        userinfo = super().get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo names another subject")
        return {**payload, **userinfo}

    def verify_claims(self, claims):
        return bool(claims.get("sub"))

    def filter_users_by_claims(self, claims):
        return self.UserModel.objects.filter(
            sign_on_identities__issuer=issuer(), sign_on_identities__subject=claims["sub"]
        )

    @transaction.atomic
    def create_user(self, claims):
        username = username_for(claims, lambda name: self.UserModel.objects.filter(username__iexact=name).exists())
        user = self.UserModel.objects.create_user(username, email=claims.get("email") or "")
        SignOnIdentity.objects.create(user=user, issuer=issuer(), subject=claims["sub"])
        return self.update_user(user, claims)

    @transaction.atomic
    def update_user(self, user, claims):
        names = {
            "email": claims.get("email") or user.email,
            "first_name": (claims.get("given_name") or user.first_name)[:150],
            "last_name": (claims.get("family_name") or user.last_name)[:150],
        }
        changed = [field for field, value in names.items() if getattr(user, field) != value]
        for field in changed:
            setattr(user, field, names[field])
        if changed:
            user.save(update_fields=changed)
        workspace = sign_on_sync(user, claims)
        # The callback view puts the person in this workspace.
        user.sign_on_workspace_id = workspace.pk if workspace else None
        return user


# --- Views ------------------------------------------------------------------------------------


def _failure_url() -> str:
    return reverse("admin:login") + "?sso=failed"


class SignOnStartView(OIDCAuthenticationRequestView):
    """/oidc/authenticate/: off to the provider with state, nonce and a PKCE challenge."""

    get_settings = staticmethod(provider_setting)

    def __init__(self, *args, **kwargs):
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request):
        if not configured():
            raise Http404
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except requests.RequestException:
            logger.exception("single sign-on: the provider's discovery document could not be read")
            return HttpResponseRedirect(_failure_url())
        self.OIDC_RP_CLIENT_ID = settings.AGENTRY_OIDC_CLIENT_ID
        return super().get(request)


class SignOnCallbackView(OIDCAuthenticationCallbackView):
    """/oidc/callback/: the code exchanged (with the PKCE verifier), the person signed in and
    put in the first workspace their claims give."""

    get_settings = staticmethod(provider_setting)

    @property
    def failure_url(self):
        return _failure_url()

    @property
    def success_url(self):
        return self.request.session.get("oidc_login_next") or reverse("admin:index")

    def get(self, request):
        if not configured():
            raise Http404
        try:
            return super().get(request)
        except requests.RequestException:
            # The provider refused the code or could not be reached: the login page says so.
            logger.exception("single sign-on: the provider's token or userinfo call failed")
            return self.login_failure()

    def login_success(self):
        response = super().login_success()
        workspace_id = getattr(self.user, "sign_on_workspace_id", None)
        if workspace_id is not None:
            self.request.session[SESSION_KEY] = workspace_id
        return response


class SignOutView(OIDCLogoutView):
    """The admin's logout: a single sign-on session ends here and, when the provider says where,
    at the provider too; any other session is the admin's own logout."""

    get_settings = staticmethod(provider_setting)

    @property
    def redirect_url(self):
        return reverse("admin:login")

    def post(self, request):
        if "oidc_id_token" not in request.session:
            return admin.site.admin_view(admin.site.logout)(request)
        return super().post(request)


def provider_logout_url(request) -> str:
    """OIDC_OP_LOGOUT_URL_METHOD: the provider's end_session_endpoint with the ID token as hint
    and the login page to come back to; the login page when the provider has none."""
    back = absolutify(request, reverse("admin:login"))
    try:
        endpoint = provider_setting("OIDC_OP_END_SESSION_ENDPOINT")
    except requests.RequestException:
        endpoint = None
    if not endpoint:
        return back
    query = {
        "id_token_hint": request.session.get("oidc_id_token", ""),
        "post_logout_redirect_uri": back,
        "client_id": settings.AGENTRY_OIDC_CLIENT_ID,
    }
    return f"{endpoint}?{urlencode(query)}"


def login_context(request) -> dict:
    """Context processor: the login page's single sign-on button and password form
    (templates/admin/login.html)."""
    if not configured():
        return {"local_login": settings.AGENTRY_LOCAL_LOGIN}
    return {
        "local_login": settings.AGENTRY_LOCAL_LOGIN,
        "sign_on_label": _("Sign in with %(provider)s") % {"provider": settings.AGENTRY_OIDC_PROVIDER_NAME},
        "sign_on_url": reverse("oidc_authentication_init"),
        "sign_on_failed": request.GET.get("sso") == "failed",
    }
