"""Single sign-on without a browser: the role map, usernames, the accounts and memberships the
backend makes from real claims, the login page and the password refusal (local login off), and the
start and callback views' refusals. The whole flow against a real provider is
test_sso_browser.py."""

from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.test import RequestFactory

from workspaces.models import Membership, SignOnIdentity, Workspace
from workspaces.sso import SignOnBackend, claimed_roles, role_map_parse, sign_on_check, username_for

ROLE_MAP = "agentry-acme-builders=acme:builder,agentry-acme-viewers=acme:viewer,agentry-beta-viewers=beta:viewer"
ISSUER = "https://idp.example.test/realms/agentry"


# --- The mapping ------------------------------------------------------------------------------


def test_role_map_is_parsed_in_order():
    assert role_map_parse(" g1 = acme:owner , ,team=x/y=beta:approver") == (
        ("g1", "acme", "owner"),
        ("team=x/y", "beta", "approver"),
    )
    assert role_map_parse("") == ()


@pytest.mark.parametrize(
    "text",
    ["acme:builder", "g=acme", "g=acme:boss", "g=acme:custom", "g=Acme Corp:viewer", "=acme:viewer"],
)
def test_a_bad_role_map_entry_is_a_configuration_error(text):
    with pytest.raises(ImproperlyConfigured, match="AGENTRY_OIDC_ROLE_MAP"):
        role_map_parse(text)


def test_claims_give_the_strongest_role_per_workspace_in_the_maps_order():
    role_map = role_map_parse(ROLE_MAP)
    claims = {"groups": ["agentry-beta-viewers", "agentry-acme-viewers", "agentry-acme-builders", "other"]}
    assert list(claimed_roles(claims, groups_claim="groups", role_map=role_map).items()) == [
        ("acme", "builder"),
        ("beta", "viewer"),
    ]
    assert claimed_roles({"roles": "agentry-beta-viewers"}, groups_claim="roles", role_map=role_map) == {
        "beta": "viewer"
    }
    assert claimed_roles({"groups": ["other", 7]}, groups_claim="groups", role_map=role_map) == {}
    assert claimed_roles({}, groups_claim="groups", role_map=role_map) == {}


def test_usernames_are_sanitized_and_unique():
    taken = {"alice", "alice-2"}
    assert username_for({"preferred_username": "alice", "email": "a@x.test"}, taken.__contains__) == "alice-3"
    assert username_for({"email": "bob o'neil@x.test", "sub": "1"}, taken.__contains__) == "boboneil@x.test"
    assert username_for({"preferred_username": "<>", "sub": "s"}, taken.__contains__) == "user"
    assert len(username_for({"preferred_username": "x" * 400}, taken.__contains__)) <= 150


def test_the_system_check_names_a_bad_map_and_a_lockout(settings):
    assert sign_on_check(None) == []
    settings.AGENTRY_OIDC_ROLE_MAP = "g=acme:boss"
    settings.AGENTRY_OIDC_CLIENT_ID = "agentry"
    settings.AGENTRY_LOCAL_LOGIN = False
    assert [message.id for message in sign_on_check(None)] == ["workspaces.E001", "workspaces.W001", "workspaces.W002"]


# --- Accounts and memberships from claims -----------------------------------------------------


@pytest.fixture
def sso(settings):
    settings.AGENTRY_OIDC_ISSUER = ""
    settings.AGENTRY_OIDC_AUTHORIZATION_ENDPOINT = f"{ISSUER}/protocol/openid-connect/auth"
    settings.AGENTRY_OIDC_TOKEN_ENDPOINT = f"{ISSUER}/protocol/openid-connect/token"
    settings.AGENTRY_OIDC_USERINFO_ENDPOINT = f"{ISSUER}/protocol/openid-connect/userinfo"
    settings.AGENTRY_OIDC_JWKS_URI = f"{ISSUER}/protocol/openid-connect/certs"
    settings.AGENTRY_OIDC_CLIENT_ID = "agentry"
    settings.AGENTRY_OIDC_CLIENT_SECRET = "secret"
    settings.AGENTRY_OIDC_PROVIDER_NAME = "Keycloak"
    settings.AGENTRY_OIDC_ROLE_MAP = ROLE_MAP
    return settings


@pytest.fixture
def workspaces(db):
    return Workspace.objects.create(name="Acme", slug="acme"), Workspace.objects.create(name="Beta", slug="beta")


def _claims(**extra):
    return {"sub": "f3a1-77", "preferred_username": "alice", "email": "alice@example.test", **extra}


def _signed_on(claims):
    backend = SignOnBackend()
    found = backend.filter_users_by_claims(claims)
    return backend.update_user(found[0], claims) if found else backend.create_user(claims)


def test_first_login_makes_a_staff_account_with_the_mapped_membership(sso, workspaces):
    acme, _beta = workspaces
    user = _signed_on(_claims(groups=["agentry-acme-builders"], given_name="Alice", family_name="Liddell"))
    user.refresh_from_db()
    assert (user.username, user.email, user.first_name, user.last_name) == (
        "alice",
        "alice@example.test",
        "Alice",
        "Liddell",
    )
    assert user.is_staff and not user.is_superuser and not user.has_usable_password()
    assert SignOnIdentity.objects.get(user=user).subject == "f3a1-77"
    assert [(m.workspace, m.role, m.from_sso) for m in Membership.objects.filter(user=user)] == [
        (acme, "builder", True)
    ]


def test_each_login_follows_the_claims_and_leaves_hand_made_memberships(sso, workspaces):
    acme, beta = workspaces
    gamma = Workspace.objects.create(name="Gamma", slug="gamma")
    user = _signed_on(_claims(groups=["agentry-acme-builders"]))
    Membership.objects.create(user=user, workspace=gamma, role="operator")

    again = _signed_on(_claims(groups=["agentry-beta-viewers"], email="alice@new.example.test"))
    assert again.pk == user.pk and again.sign_on_workspace_id == beta.pk
    assert {(m.workspace.slug, m.role, m.from_sso) for m in Membership.objects.filter(user=user)} == {
        ("beta", "viewer", True),
        ("gamma", "operator", False),
    }
    assert get_user_model().objects.get(pk=user.pk).email == "alice@new.example.test"

    # No mapped group left: the SSO memberships go; the hand-made one keeps the account staff.
    _signed_on(_claims(groups=[]))
    assert {m.workspace.slug for m in Membership.objects.filter(user=user)} == {"gamma"}
    assert get_user_model().objects.get(pk=user.pk).is_staff
    Membership.objects.filter(user=user).delete()
    _signed_on(_claims(groups=["unmapped"]))
    assert not get_user_model().objects.get(pk=user.pk).is_staff


def test_a_person_is_found_by_subject_never_by_email_or_name(sso, workspaces):
    local = get_user_model().objects.create_user("alice", email="alice@example.test", password="local-pass-1")
    user = _signed_on(_claims(groups=["agentry-acme-viewers"]))
    assert user.pk != local.pk and user.username == "alice-2"
    assert not Membership.objects.filter(user=local, from_sso=True).exists()
    # The same subject from another issuer is someone else.
    sso.AGENTRY_OIDC_AUTHORIZATION_ENDPOINT = "https://other.example.test/auth"
    assert not SignOnBackend().filter_users_by_claims(_claims()).exists()


def test_a_workspace_the_map_names_but_which_does_not_exist_is_skipped(sso, workspaces):
    sso.AGENTRY_OIDC_ROLE_MAP = "g=nowhere:owner,agentry-beta-viewers=beta:viewer"
    user = _signed_on(_claims(groups=["g", "agentry-beta-viewers"]))
    assert [m.workspace.slug for m in Membership.objects.filter(user=user)] == ["beta"]
    assert user.sign_on_workspace_id == workspaces[1].pk


def test_the_backend_answers_nothing_without_a_callback_or_configuration(settings, db):
    request = RequestFactory().get("/oidc/callback/", {"code": "c", "state": "s"})
    assert SignOnBackend().authenticate(request) is None
    settings.AGENTRY_OIDC_CLIENT_ID = "agentry"
    settings.AGENTRY_OIDC_AUTHORIZATION_ENDPOINT = "https://idp.example.test/auth"
    assert SignOnBackend().authenticate(RequestFactory().get("/admin/login/"), username="a", password="b") is None


def test_an_id_token_for_another_client_or_from_another_issuer_is_refused(sso):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sso.AGENTRY_OIDC_ISSUER = ISSUER
    sso.OIDC_RP_IDP_SIGN_KEY = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    backend = SignOnBackend()
    super(SignOnBackend, backend).__init__()  # what authenticate() does before a callback

    def token(**claims):
        return jwt.encode({"sub": "s1", "nonce": "n", **claims}, key, algorithm="RS256")

    assert backend.verify_token(token(aud="agentry", iss=ISSUER), nonce="n")["sub"] == "s1"
    assert backend.verify_token(token(aud=["other", "agentry"], iss=ISSUER), nonce="n")["sub"] == "s1"
    with pytest.raises(SuspiciousOperation, match="another client"):
        backend.verify_token(token(aud="other", iss=ISSUER), nonce="n")
    with pytest.raises(SuspiciousOperation, match="another issuer"):
        backend.verify_token(token(aud="agentry", iss="https://evil.example.test"), nonce="n")
    with pytest.raises(SuspiciousOperation, match="Nonce"):
        backend.verify_token(token(aud="agentry", iss=ISSUER), nonce="replayed")


# --- The login page and the views -------------------------------------------------------------


def test_login_page_without_single_sign_on_is_the_password_form(client, db):
    page = client.get("/admin/login/").content.decode()
    assert 'name="password"' in page and "Sign in with" not in page
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/", {"code": "c", "state": "s"}).status_code == 404


def test_login_page_offers_the_provider_beside_the_password_form(client, sso, db):
    page = client.get("/admin/login/?next=/admin/agents/").content.decode()
    assert 'href="/oidc/authenticate/?next=/admin/agents/"' in page and "Sign in with Keycloak" in page
    assert 'name="password"' in page
    get_user_model().objects.create_user("admin", password="admin-pass-1", is_staff=True)
    response = client.post("/admin/login/", {"username": "admin", "password": "admin-pass-1", "next": "/admin/"})
    assert response.status_code == 302 and client.session.get("_auth_user_id")


def test_with_local_login_off_the_password_form_is_gone_and_a_password_refused(client, sso, db):
    sso.AGENTRY_LOCAL_LOGIN = False
    get_user_model().objects.create_user("admin", password="admin-pass-1", is_staff=True, is_superuser=True)
    page = client.get("/admin/login/").content.decode()
    assert "Sign in with Keycloak" in page and 'name="password"' not in page

    response = client.post("/admin/login/", {"username": "admin", "password": "admin-pass-1", "next": "/admin/"})
    assert response.status_code == 200 and "_auth_user_id" not in client.session
    assert "Signing in with a password is turned off here" in response.content.decode()
    page = client.get("/approvals/login/").content.decode()
    assert 'href="/oidc/authenticate/?next=/approvals/"' in page and 'name="password"' not in page
    response = client.post("/approvals/login/", {"username": "admin", "password": "admin-pass-1"})
    assert response.status_code == 200 and "_auth_user_id" not in client.session
    assert "Signing in with a password is turned off here" in response.content.decode()


def test_the_start_sends_a_pkce_challenge_state_and_nonce(client, sso, db):
    response = client.get("/oidc/authenticate/", {"next": "/admin/agents/"})
    assert response.status_code == 302
    url = urlsplit(response["Location"])
    query = {key: values[0] for key, values in parse_qs(url.query).items()}
    assert f"{url.scheme}://{url.netloc}{url.path}" == sso.AGENTRY_OIDC_AUTHORIZATION_ENDPOINT
    assert query["client_id"] == "agentry" and query["response_type"] == "code"
    assert query["scope"] == "openid email profile" and query["code_challenge_method"] == "S256"
    assert query["redirect_uri"] == "http://testserver/oidc/callback/"
    state = client.session["oidc_states"][query["state"]]
    assert state["nonce"] == query["nonce"] and len(state["code_verifier"]) >= 43
    assert client.session["oidc_login_next"] == "/admin/agents/"
    # An outside "next" is dropped.
    client.get("/oidc/authenticate/", {"next": "https://evil.example.test/"})
    assert client.session["oidc_login_next"] is None


def test_a_callback_without_a_started_login_is_refused(client, sso, db):
    response = client.get("/oidc/callback/", {"code": "c", "state": "s"})
    assert response.status_code == 302 and response["Location"] == "/admin/login/?sso=failed"
    assert "Single sign-on did not complete" in client.get(response["Location"]).content.decode()
    client.get("/oidc/authenticate/")
    assert client.get("/oidc/callback/", {"code": "c", "state": "forged"}).status_code == 400
    assert "_auth_user_id" not in client.session


def test_a_callback_whose_code_the_provider_refuses_fails_to_the_login_page(client, sso, db):
    # Nothing listens there: the token call fails as a refused code would.
    sso.AGENTRY_OIDC_TOKEN_ENDPOINT = "http://127.0.0.1:9/token"
    start = client.get("/oidc/authenticate/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    response = client.get("/oidc/callback/", {"code": "c", "state": state})
    assert response.status_code == 302 and response["Location"] == "/admin/login/?sso=failed"
    assert "_auth_user_id" not in client.session


def test_a_password_session_logs_out_as_the_admin_always_did(client, db):
    user = get_user_model().objects.create_user("admin", password="admin-pass-1", is_staff=True)
    client.force_login(user)
    response = client.post("/admin/logout/")
    assert response.status_code == 200 and "_auth_user_id" not in client.session
    assert client.get("/admin/logout/").status_code == 405
