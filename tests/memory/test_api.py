"""GET /api/v1/end-users/{end_user}/memories/ and DELETE …/memories/{id}/: the caller's own end
user's memories only (another token owner's end user of the same id is another person), narrowed
to an agent's scope on request, deletions audited; bad input is a 4xx in the API's error shape."""

import uuid

import pytest
from rest_framework.test import APIClient

from memory.models import Memory, MemoryChange
from memory.services import MemoryProposal, memory_apply
from tests.support.api import client_for
from tests.support.factories import make_agent, make_user
from workspaces.defaults import default_workspace_id

pytestmark = pytest.mark.django_db


def _remember(owner, end_user: str, statement: str, *, scope: str = "agent:1", kind: str = "fact") -> Memory:
    [change] = memory_apply(
        workspace_id=default_workspace_id(),
        scope=scope,
        owner_id=owner.pk,
        end_user=end_user,
        proposals=[MemoryProposal("add", kind, statement)],
        source="extraction",
        kinds=[],
        ttl_days=None,
    )
    return change.memory


def _url(end_user: str, memory_id=None) -> str:
    base = f"/api/v1/end-users/{end_user}/memories/"
    return base if memory_id is None else f"{base}{memory_id}/"


def test_the_caller_lists_only_their_own_end_user_s_memories(owner):
    mine = _remember(owner, "u1", "住在成都")
    _remember(owner, "u2", "住在北京")
    _remember(make_user(), "u1", "住在上海")  # another application's u1

    response = client_for(owner).get(_url("u1"))

    assert response.status_code == 200
    [listed] = response.json()["results"]
    assert listed["id"] == str(mine.pk) and listed["statement"] == "住在成都" and listed["scope"] == "agent:1"
    assert set(listed) == {
        "id",
        "scope",
        "channel",
        "kind",
        "statement",
        "source_run",
        "created_at",
        "updated_at",
        "last_used_at",
        "expires_at",
    }
    assert client_for(owner).get(_url("nobody")).json()["results"] == []


def test_an_agent_narrows_the_list_to_its_memory_space(owner):
    own = make_agent(memory_enabled=True)
    shared = make_agent(memory_enabled=True, memory_space="support")
    _remember(owner, "u1", "住在成都", scope=f"agent:{own.pk}")
    _remember(owner, "u1", "喜欢喝茶", scope="support", kind="preference")
    api = client_for(owner)

    assert [m["statement"] for m in api.get(_url("u1"), {"agent": own.slug}).json()["results"]] == ["住在成都"]
    assert [m["statement"] for m in api.get(_url("u1"), {"agent": shared.slug}).json()["results"]] == ["喜欢喝茶"]

    unknown = api.get(_url("u1"), {"agent": "no-such-agent"})
    assert unknown.status_code == 400 and "agent" in unknown.json()["message"]
    assert api.get(_url("u1"), {"agent": "not a slug!"}).status_code == 400


def test_deleting_a_memory_removes_it_with_an_api_change_row(owner):
    memory = _remember(owner, "u1", "住在成都")

    response = client_for(owner).delete(_url("u1", memory.pk))

    assert response.status_code == 204
    assert not Memory.objects.exists()
    change = MemoryChange.objects.get(action="delete")
    assert (change.source, change.before, change.changed_by, change.end_user) == ("api", "住在成都", owner, "u1")


def test_another_owner_s_or_another_end_user_s_memory_is_not_found(owner):
    theirs = _remember(make_user(), "u1", "住在上海")
    other_end_user = _remember(owner, "u2", "住在北京")
    api = client_for(owner)

    assert api.delete(_url("u1", theirs.pk)).status_code == 404
    assert api.delete(_url("u1", other_end_user.pk)).status_code == 404
    assert api.delete(_url("u1", uuid.uuid4())).json()["message"]
    assert Memory.objects.count() == 2 and not MemoryChange.objects.filter(action="delete").exists()


def test_bad_input_is_a_4xx(owner):
    api = client_for(owner)
    assert api.get(_url("x" * 201)).status_code == 400
    assert api.get(_url("%20")).status_code == 400
    assert api.delete(_url("u1", "not-a-uuid")).status_code == 404
    assert api.post(_url("u1"), {}, format="json").status_code == 405
    assert api.put(_url("u1", uuid.uuid4()), {}, format="json").status_code == 405
    assert APIClient().get(_url("u1")).status_code == 401
