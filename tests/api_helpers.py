"""Users, tokens and clients for API tests."""

import uuid

from django.contrib.auth.models import User
from rest_framework.test import APIClient

from conversations.tokens import api_token_create


def make_user(*, staff: bool = False, groups=()) -> User:
    user = User.objects.create_user(username=f"user-{uuid.uuid4().hex[:8]}", password="pw", is_staff=staff)
    user.groups.set(groups)
    return user


def token_for(user: User) -> str:
    return api_token_create(user=user, name="tests")[1]


def client_for(user: User, *, keyword: str = "Bearer") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{keyword} {token_for(user)}")
    return client
