"""An installation populated before workspaces, migrated to them: one workspace "default" owns
every configuration object, every account is a member with the custom role, and every row and
every total (runs, tokens, cost, memories) is as it was; back to before and forward again too.

Rows are written through the historical models of the state before workspaces (the models of
today have columns that state does not), with Django's MigrationExecutor as
tests/notifications/test_migration.py does with the migrate command."""

from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, Sum

# What belongs to a workspace by a column of its own, and so must all be in "default".
CONFIGURATION = [
    ("agents", "ModelConfig"),
    ("agents", "Agent"),
    ("agents", "GuardrailRule"),
    ("tools", "ToolDefinition"),
    ("tools", "MCPServer"),
    ("knowledge", "KnowledgeBase"),
    ("memory", "Memory"),
    ("evals", "EvalSuite"),
    ("triggers", "Schedule"),
    ("triggers", "Hook"),
    ("widgets", "Widget"),
    ("notifications", "Webhook"),
    ("alerts", "AlertRule"),
    ("conversations", "ApiToken"),
    ("audit", "ConfigChange"),
]
# Every row of these is compared, column by column, as the state before workspaces has them.
KEPT = [
    ("auth", "User"),
    ("agents", "ModelConfig"),
    ("agents", "Agent"),
    ("agents", "AgentVersion"),
    ("agents", "AgentTool"),
    ("tools", "ToolDefinition"),
    ("conversations", "Conversation"),
    ("conversations", "Run"),
    ("conversations", "LLMCall"),
    ("conversations", "LLMCallHourly"),
    ("conversations", "ApiToken"),
    ("memory", "Memory"),
    ("triggers", "Schedule"),
    ("triggers", "Hook"),
    ("widgets", "Widget"),
    ("alerts", "AlertRule"),
    ("evals", "EvalSuite"),
    ("audit", "ConfigChange"),
]


def _before_workspaces(graph) -> list[tuple[str, str | None]]:
    """Each app at the migration before its first one that needs workspaces; workspaces at zero."""
    targets = {"workspaces": None}
    for app, name in sorted(graph.nodes):
        if app == "workspaces" or app in targets:
            continue
        if any(dependency[0] == "workspaces" for dependency in graph.nodes[(app, name)].dependencies):
            parents = [parent.key for parent in graph.node_map[(app, name)].parents if parent.key[0] == app]
            targets[app] = parents[0][1] if parents else None
    return list(targets.items())


def _migrate(targets):
    """Migrate to `targets`; the historical models of the state the database is then in."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(list(executor.loader.applied_migrations)).apps


def _populate(apps) -> None:
    """A small installation: two accounts, a model config, two agents (one with a tool), runs
    with model calls, tokens and cost, a fork, memories, a schedule, a hook, a widget, an API
    token, an alert rule, an eval suite and an audit row."""
    get = apps.get_model
    admin = get("auth", "User").objects.create(username="admin", password="!", is_superuser=True, is_staff=True)
    get("auth", "User").objects.create(username="ops", password="!", is_staff=True)
    model = get("agents", "ModelConfig").objects.create(name="gpt", base_url="http://127.0.0.1:9/v1", model="demo")
    tool = get("tools", "ToolDefinition").objects.create(name="weather", description="The weather.")
    agents = []
    for slug in ("weather", "routes"):
        agent = get("agents", "Agent").objects.create(name=slug, slug=slug, model_config=model)
        version = get("agents", "AgentVersion").objects.create(agent=agent, number=1, config_hash=slug, snapshot={})
        agents.append((agent, version))
    get("agents", "AgentTool").objects.create(agent=agents[0][0], tool=tool)
    runs = []
    for index in range(6):
        agent, version = agents[index % 2]
        conversation = get("conversations", "Conversation").objects.create(agent=agent, end_user=f"u{index % 3}")
        run = get("conversations", "Run").objects.create(
            conversation=conversation, agent=agent, agent_version=version, status="completed"
        )
        runs.append(run)
        for attempt in (1, 2):
            get("conversations", "LLMCall").objects.create(
                run=run,
                iteration=1,
                attempt=attempt,
                model_config=model,
                provider="openai",
                model_name="demo",
                request={},
                status="succeeded",
                prompt_tokens=100 + index,
                completion_tokens=10 * attempt,
                total_tokens=100 + index + 10 * attempt,
                cost=Decimal("0.00012345") * (index + 1),
            )
    get("conversations", "Run").objects.create(
        conversation=runs[0].conversation,
        agent=agents[0][0],
        agent_version=agents[0][1],
        status="completed",
        forked_from=runs[0],
        fork_step=1,
    )
    get("conversations", "LLMCallHourly").objects.create(
        hour="2026-12-01T10:00:00Z",
        model_config=model,
        agent=agents[0][0],
        calls=12,
        prompt_tokens=1215,
        total_tokens=1395,
        cost=Decimal("0.0025925"),
    )
    for index in range(5):
        get("memory", "Memory").objects.create(
            scope=agents[0][0].slug, end_user=f"u{index % 2}", kind="fact", statement=f"Lives in city {index}."
        )
    weather = agents[0][0]
    get("triggers", "Schedule").objects.create(agent=weather, name="daily", message="Report.", cron="0 9 * * *")
    get("triggers", "Hook").objects.create(agent=weather, name="orders", secret="s" * 32, message="{{ body }}")
    get("widgets", "Widget").objects.create(agent=weather, name="site", secret="w" * 32, owner=admin)
    get("conversations", "ApiToken").objects.create(user=admin, name="ci", prefix="agt_abcdefgh", key_hash="h" * 64)
    get("alerts", "AlertRule").objects.create(name="cost", kind="cost", threshold=Decimal("5"), agent=weather)
    get("evals", "EvalSuite").objects.create(name="smoke")
    get("audit", "ConfigChange").objects.create(
        action="create",
        source="admin",
        content_type=get("contenttypes", "ContentType").objects.get(app_label="agents", model="agent"),
        object_id=str(weather.pk),
        object_repr="weather",
        agent_id=weather.pk,
        changes={"slug": [None, "weather"]},
    )


def _rows(apps, columns: dict) -> dict:
    found = {}
    for app, name in KEPT:
        model = apps.get_model(app, name)
        found[(app, name)] = list(model._base_manager.order_by("pk").values(*columns[(app, name)]))
    return found


def _columns(apps) -> dict:
    return {
        (app, name): [field.attname for field in apps.get_model(app, name)._meta.concrete_fields] for app, name in KEPT
    }


def _totals(apps) -> dict:
    get = apps.get_model
    calls = get("conversations", "LLMCall").objects
    hourly = get("conversations", "LLMCallHourly").objects
    sums = ("prompt_tokens", "completion_tokens", "total_tokens", "cost")
    return {
        "runs by agent": dict(
            get("conversations", "Run").objects.values_list("agent__slug").annotate(n=Count("id")).order_by()
        ),
        "forks": get("conversations", "Run").objects.filter(forked_from__isnull=False).count(),
        "calls": calls.aggregate(n=Count("id"), **{field: Sum(field) for field in sums}),
        "calls by agent": dict(calls.values_list("run__agent__slug").annotate(cost=Sum("cost")).order_by()),
        "hourly": hourly.aggregate(**{field: Sum(field) for field in sums}),
        "memories by end user": dict(
            get("memory", "Memory").objects.values_list("end_user").annotate(n=Count("id")).order_by()
        ),
    }


def _assert_one_default_workspace(apps) -> None:
    workspace = apps.get_model("workspaces", "Workspace").objects.get()
    assert (workspace.slug, workspace.name) == ("default", "Default")
    for app, name in CONFIGURATION:
        rows = apps.get_model(app, name)._base_manager
        assert set(rows.values_list("workspace_id", flat=True)) <= {workspace.pk}, (app, name)
    users = set(apps.get_model("auth", "User").objects.values_list("pk", flat=True))
    members = apps.get_model("workspaces", "Membership").objects.all()
    assert {(m.user_id, m.workspace_id, m.role) for m in members} == {(pk, workspace.pk, "custom") for pk in users}


@pytest.mark.django_db(transaction=True)
def test_a_populated_installation_keeps_every_row_and_total_through_the_workspace_migrations():
    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    before = _before_workspaces(MigrationExecutor(connection).loader.graph)
    try:
        old = _migrate(before)
        _populate(old)
        columns = _columns(old)
        rows, totals = _rows(old, columns), _totals(old)
        assert totals["runs by agent"] == {"weather": 4, "routes": 3} and totals["forks"] == 1
        assert totals["calls"]["n"] == 12 and totals["memories by end user"] == {"u0": 3, "u1": 2}

        new = _migrate(leaves)
        _assert_one_default_workspace(new)
        assert _rows(new, columns) == rows
        assert _totals(new) == totals

        # Back to before workspaces (nothing lost but the workspace columns), and forward again.
        old = _migrate(before)
        assert _rows(old, columns) == rows
        assert _totals(old) == totals
        new = _migrate(leaves)
        _assert_one_default_workspace(new)
        assert _rows(new, columns) == rows
        assert _totals(new) == totals
    finally:
        _migrate(leaves)
