"""The admin mints a token only where it would open something: the same rule as the command's
(conversations.tokens.api_token_grant_check), shown as a form error, nothing written."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from conversations.models import ApiToken
from tests.support.factories import make_user
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db
ADD = "admin:conversations_apitoken_add"


@pytest.fixture
def two():
    first = Workspace.objects.get(pk=default_workspace_id())
    second = Workspace.objects.create(name="Beta", slug="beta")
    return first, second


def test_a_superuser_cannot_mint_a_token_for_someone_outside_its_workspace(client, two):
    first, second = two
    admin = get_user_model().objects.create_superuser("root", password="pw")
    client.force_login(admin)
    outsider = make_user()
    membership_set(user=outsider, workspace=second, role=Role.OWNER)
    form = {"workspace": first.pk, "user": outsider.pk, "name": "app", "role": ""}
    refused = client.post(reverse(ADD), form)
    assert refused.status_code == 200
    assert "is not a member of this workspace" in str(refused.context["adminform"].form.non_field_errors())
    assert not ApiToken.objects.filter(user=outsider).exists()
    # In the workspace they belong to, the same token is minted.
    minted = client.post(reverse(ADD), {**form, "workspace": second.pk})
    assert minted.status_code == 302
    assert ApiToken.objects.get(user=outsider).workspace == second


def test_a_member_mints_their_own_token_in_the_workspace_they_act_in(client, two):
    first, _second = two
    member = make_user(staff=True)
    membership_set(user=member, workspace=first, role=Role.VIEWER)
    client.force_login(member)
    # Viewers may not add tokens (add_apitoken is an owner's); an owner may, for themselves.
    assert client.post(reverse(ADD), {"name": "mine", "role": ""}).status_code == 403
    membership_set(user=member, workspace=first, role=Role.OWNER)
    assert client.post(reverse(ADD), {"name": "mine", "role": ""}).status_code == 302
    assert ApiToken.objects.get(user=member).workspace == first
