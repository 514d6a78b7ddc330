"""A run's timeline (its page and its JSON) shows the long-term memories the run was shown and
the ones it wrote, each once, whatever the number of its model calls."""

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memory.models import MemoryUse
from memory.services import MemoryProposal, memory_apply
from tests.support.factories import make_agent, make_user
from tests.support.ledger import ledger_call, ledger_run
from workspaces.defaults import default_workspace_id

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client):
    user = make_user(staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="conversations", codename="view_run"))
    client.force_login(user)
    return user


def _run_with_memories(owner, *, calls: int = 2):
    """A run shown 住在成都 (rank 1) and 有一只猫 (rank 2) at each of its calls, whose extraction
    then updated 住在成都 to 住在重庆."""
    earlier = ledger_run(make_agent())
    changes = memory_apply(
        workspace_id=default_workspace_id(),
        scope="agent:1",
        owner_id=owner.pk,
        end_user="u1",
        proposals=[MemoryProposal("add", "fact", "住在成都"), MemoryProposal("add", "fact", "有一只猫")],
        source="extraction",
        kinds=[],
        ttl_days=None,
        run=earlier,
    )
    run = ledger_run(earlier.agent)
    for _ in range(calls):
        call = ledger_call(run, started_at=timezone.now())
        for rank, change in enumerate(changes, start=1):
            MemoryUse.objects.create(llm_call=call, run=run, memory=change.memory, rank=rank)
    memory_apply(
        workspace_id=default_workspace_id(),
        scope="agent:1",
        owner_id=owner.pk,
        end_user="u1",
        proposals=[MemoryProposal("update", "fact", "住在重庆", memory_id=str(changes[0].memory_id))],
        source="extraction",
        kinds=[],
        ttl_days=None,
        run=run,
    )
    return run


def test_the_timeline_json_lists_the_memories_shown_and_written(client, operator):
    run = _run_with_memories(operator)

    memories = client.get(reverse("monitoring:run-json", args=[run.pk])).json()["memories"]

    assert [(m["statement"], m["rank"], len(m["llm_call_ids"])) for m in memories["shown"]] == [
        ("住在重庆", 1, 2),
        ("有一只猫", 2, 2),
    ]
    [written] = memories["written"]
    assert (written["action"], written["source"], written["before"], written["after"]) == (
        "update",
        "extraction",
        "住在成都",
        "住在重庆",
    )


def test_the_timeline_page_shows_them_in_a_fixed_number_of_queries(client, operator):
    run = _run_with_memories(operator)
    longer = _run_with_memories(make_user(), calls=6)

    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()

    memories = page[page.index('id="memories"') :]
    assert "Shown to this run" in memories and "有一只猫" in memories
    assert "Written by this run" in memories and "住在成都" in memories and "住在重庆" in memories

    def queries(one) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(reverse("monitoring:run", args=[one.pk])).status_code == 200
        return len(captured)

    assert queries(run) == queries(longer)


def test_a_run_without_memory_shows_no_memory_section(client, operator):
    run = ledger_run(make_agent())
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    assert 'id="memories"' not in page
    assert client.get(reverse("monitoring:run-json", args=[run.pk])).json()["memories"] == {"shown": [], "written": []}
