"""API clients for a user, authenticated with a fresh API token (tests.support.factories.token_for)."""

from rest_framework.test import APIClient

from tests.support.factories import token_for


def client_for(user, *, keyword: str = "Bearer") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{keyword} {token_for(user)}")
    return client
