"""agentry_token_create: a token acts in one workspace with a role or scopes, minted by a member
(an owner for another member's token)."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from conversations.models import ApiToken
from tests.support.factories import make_agent, make_user
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def people():
    a = Workspace.objects.get(pk=default_workspace_id())
    b = Workspace.objects.create(name="Beta", slug="beta")
    owner, operator, outsider = make_user(), make_user(), make_user()
    membership_set(user=owner, workspace=a, role=Role.OWNER)
    membership_set(user=operator, workspace=a, role=Role.OPERATOR)
    membership_set(user=outsider, workspace=b, role=Role.OWNER)
    return {"a": a, "b": b, "owner": owner, "operator": operator, "outsider": outsider}


def _mint(*args) -> str:
    out = StringIO()
    call_command("agentry_token_create", *args, stdout=out)
    return out.getvalue().strip()


def test_a_member_mints_a_narrow_token_that_acts_in_its_workspace(people):
    a = people["a"]
    make_agent(slug="a-agent")
    secret = _mint(
        people["operator"].username, "--workspace", a.slug, "--scopes", "approvals, runs", "--role", "viewer"
    )
    token = ApiToken.objects.get(user=people["operator"])
    assert (token.workspace_id, token.role, token.scopes) == (a.pk, "viewer", ["approvals", "runs"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/runs/").status_code == 200
    # A viewer's ceiling: no new conversation, whatever the scopes say.
    posted = client.post("/api/v1/conversations/", {"agent": "a-agent"}, content_type="application/json")
    assert posted.status_code == 403
    # The owner mints one for another member.
    _mint(people["operator"].username, "--workspace", a.slug, "--by", people["owner"].username, "--name", "ops")
    assert ApiToken.objects.filter(user=people["operator"], name="ops").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["{operator}", "--workspace", "beta"], "not a member"),
        (["{operator}", "--workspace", "default", "--by", "{outsider}"], "not a member"),
        (["{owner}", "--workspace", "default", "--by", "{operator}"], "Only an owner"),
        (["{operator}", "--workspace", "default", "--role", "custom"], "Unknown role"),
        (["{operator}", "--workspace", "default", "--role", "root"], "Unknown role"),
        (["{operator}", "--workspace", "default", "--scopes", "everything"], "Unknown scopes"),
        (["{operator}", "--workspace", "nowhere"], "No workspace"),
        (["nobody-at-all", "--workspace", "default"], "No active user"),
    ],
)
def test_a_token_nobody_may_mint_is_refused_and_nothing_is_written(people, args, message):
    names = {key: people[key].username for key in ("owner", "operator", "outsider")}
    slug = people["a"].slug
    filled = [arg.format(**names).replace("default", slug) if arg != "nowhere" else arg for arg in args]
    with pytest.raises(CommandError, match=message):
        _mint(*filled)
    assert not ApiToken.objects.exists()
