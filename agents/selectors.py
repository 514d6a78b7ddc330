"""Reads on agents."""

from collections.abc import Iterable
from dataclasses import fields
from datetime import date
from decimal import Decimal
from functools import cache, partial

from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery, Sum

from agents.models import (
    Agent,
    AgentDelegate,
    AgentRelease,
    AgentTool,
    AgentUsageDay,
    AgentVersion,
    GuardrailRule,
    ModelConfig,
    RoutingRule,
)
from agents.providers.calibration import Calibration
from agents.snapshot import AgentSnapshot, SnapshotInvalid, ToolSpec, snapshot_parse, snapshot_tools
from platform_site.rows import Columns
from platform_site.statements import bound
from tools.approval_policy import ApprovalPolicy, LiveApproval, approval_stricter, effective_policy
from tools.models import ToolDefinition
from workspaces.access import binding_of


def agent_usage_on(*, agent_id: int, day: date) -> tuple[int, Decimal]:
    """(tokens, cost) the agent used on `day` in its time zone: the sum of the day's shards."""
    usage = AgentUsageDay.objects.filter(agent_id=agent_id, day=day).aggregate(
        tokens=Sum("total_tokens"), cost=Sum("cost")
    )
    return usage["tokens"] or 0, usage["cost"] or Decimal(0)


def agents_usable_by(*, user) -> QuerySet[Agent]:
    """Active agents the user may talk to, in the workspace they act in: those without group
    restrictions, those shared with one of the user's groups, and all of them for superusers.
    Being staff grants nothing here: an agent restricted to a group stays restricted for
    operators outside it."""
    return agents_usable(user_id=user.pk, superuser=user.is_superuser, workspace_id=binding_of(user).workspace_id)


def agent_usable_by(*, user, slug: str) -> Agent | None:
    """The agent with this slug if the user may talk to it (agents_usable_by), else None.

    Every new conversation and every chat completion starts with this read; its statement is
    built once per kind of user and only bound afterwards (platform_site.statements): through
    the ORM it took about a third of a new conversation's CPU."""
    workspace = binding_of(user).workspace
    workspace_id = None if workspace is None else workspace.pk
    values = {"slug": slug} if user.is_superuser else {"slug": slug, "user": user.pk}
    if workspace_id is not None:
        values["workspace"] = workspace_id
    build = partial(_usable_by_slug_sql, superuser=user.is_superuser)
    sql, params = bound(("usable agent by slug", user.is_superuser, workspace_id is not None), build, values)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    agent = _AGENT.instance(row)
    if workspace is not None:
        # Found in the workspace the user acts in, already read (for an API token, with it):
        # admission checks its budgets without reading it again.
        agent.workspace = workspace
    return agent


_AGENT = Columns(Agent, None, "a")


def _usable_by_slug_sql(values: dict, *, superuser: bool) -> tuple[str, tuple]:
    # The ORM selects every concrete column in the model's order, which is what _AGENT reads.
    usable = agents_usable(user_id=values.get("user"), superuser=superuser, workspace_id=values.get("workspace"))
    found = usable.filter(slug=values["slug"])
    return found.query.get_compiler(found.db).as_sql()


def agents_usable(*, user_id: int, superuser: bool, workspace_id: int | None = None) -> QuerySet[Agent]:
    """agents_usable_by, for the user with this id (a statement built once with stand-in values:
    platform_site.statements), in this workspace (None: every workspace, a superuser's view or
    the caller has already fixed the workspace)."""
    agents = Agent.objects.filter(is_active=True)
    if workspace_id is not None:
        agents = agents.filter(workspace_id=workspace_id)
    if superuser:
        return agents
    restricted = Agent.allowed_groups.through.objects.filter(agent_id=OuterRef("pk"))
    shared = restricted.filter(group__user=user_id)
    return agents.filter(Q(~Exists(restricted)) | Q(Exists(shared)))


@cache
def _config_columns() -> str:
    """Every column the models know, spelled out: a prepared statement (settings:
    AGENTRY_DB_PREPARE) selecting `m.*` fails once a migration adds a column, in a process still
    running the code before it; a column the code does not know is not read by snapshot_build
    either. A model config's calibration sums are left out: the engine adds to them as calls
    complete, and the snapshot does not read them."""
    learned = {field.name for field in fields(Calibration)}
    config_fields = tuple(field.name for field in ModelConfig._meta.concrete_fields if field.name not in learned)
    aliases = (
        ("m", ModelConfig),
        ("f", ModelConfig),
        ("l", AgentTool),
        ("t", ToolDefinition),
        ("g", GuardrailRule),
        ("gm", ModelConfig),
        ("d", AgentDelegate),
        ("e", ModelConfig),
        ("tm", ModelConfig),
        ("dm", ModelConfig),
        ("rr", RoutingRule),
        ("rm", ModelConfig),
        ("rc", ModelConfig),
    )
    return ", ".join(
        Columns(model, config_fields if model is ModelConfig else None, alias).sql for alias, model in aliases
    )


def agent_config_state(*, agent: Agent) -> tuple[tuple, int | None]:
    """What agents.snapshot.snapshot_build(agent) would read, and the id of the agent's latest
    version, in one statement.

    The state is the agent's own columns (as held by `agent`, which is what the build reads)
    and every column of its model configs, tool links and their tools, guardrail rules and their
    moderation models, delegates (agents as tools) and their agents' slug and activity, the models
    that turn parts into text (transcription, description), routing rules and their models, so that any
    write, a queryset update or a raw one included, changes it. Equal states build equal snapshots;
    a new input of snapshot_build must be added here."""
    tables = (ModelConfig, AgentTool, ToolDefinition, AgentVersion, GuardrailRule, AgentDelegate, Agent, RoutingRule)
    configs, links, tools, versions, rules, delegates, agents, routes = (m._meta.db_table for m in tables)
    # Links, rules, delegates and routing rules are independent, so their join is a cross product
    # (a few rows per agent) in a fixed order: it changes exactly when one of them does.
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT (SELECT v."id" FROM "{versions}" v WHERE v."agent_id" = %s AND NOT v."playground" '
            'ORDER BY v."number" DESC LIMIT 1), '
            f'{_config_columns()}, c."slug", c."is_active" '
            f'FROM "{configs}" m LEFT JOIN "{configs}" f ON f."id" = %s '
            f'LEFT JOIN "{links}" l ON l."agent_id" = %s LEFT JOIN "{tools}" t ON t."id" = l."tool_id" '
            f'LEFT JOIN "{rules}" g ON g."agent_id" = %s LEFT JOIN "{configs}" gm ON gm."id" = g."model_config_id" '
            f'LEFT JOIN "{delegates}" d ON d."parent_id" = %s LEFT JOIN "{agents}" c ON c."id" = d."child_id" '
            f'LEFT JOIN "{configs}" e ON e."id" = %s '
            f'LEFT JOIN "{configs}" tm ON tm."id" = %s LEFT JOIN "{configs}" dm ON dm."id" = %s '
            f'LEFT JOIN "{routes}" rr ON rr."agent_id" = %s LEFT JOIN "{configs}" rm ON rm."id" = rr."model_config_id" '
            f'LEFT JOIN "{configs}" rc ON rc."id" = rr."classifier_model_id" '
            'WHERE m."id" = %s ORDER BY l."id", g."id", d."id", rr."id"',
            [
                agent.pk,
                agent.fallback_model_config_id,
                agent.pk,
                agent.pk,
                agent.pk,
                agent.memory_embedding_model_id,
                agent.transcription_model_config_id,
                agent.description_model_config_id,
                agent.pk,
                agent.model_config_id,
            ],
        )
        rows = cursor.fetchall()
    own = tuple(getattr(agent, field.attname) for field in Agent._meta.concrete_fields)
    return (own, *(row[1:] for row in rows)), rows[0][0] if rows else None


def agent_versions(*, agent: Agent, limit: int = 200) -> QuerySet[AgentVersion]:
    """The agent's latest versions, newest first, without their snapshots (a page lists them).
    An agent served as a draft writes a version per saved change, so the list is bounded."""
    return (
        AgentVersion.objects.filter(agent=agent, playground=False)
        .select_related("published_by")
        .defer("snapshot")
        .order_by("-number")[:limit]
    )


def agent_releases(*, agent: Agent, limit: int = 100) -> QuerySet[AgentRelease]:
    return (
        AgentRelease.objects.filter(agent=agent)
        .select_related("version", "previous_version", "user")
        .defer("version__snapshot", "previous_version__snapshot")
        .order_by("-at", "-pk")[:limit]
    )


def tool_approvals_now(*, agent_id: int, tool_ids: list[int]) -> dict[int, dict]:
    """The approval each tool (by id) has now for the agent, resolved as a version built now would
    pin it (agents.snapshot): the tool's policy, or the agent's override of it. One read. A tool
    the agent no longer links keeps its own policy: tightening it still reaches the versions that
    pinned it."""
    link = AgentTool.objects.filter(agent_id=agent_id, tool_id=OuterRef("pk"))
    rows = (
        ToolDefinition.objects.filter(pk__in=tool_ids)
        .annotate(
            override=Subquery(link.values("approval")[:1]), override_rule=Subquery(link.values("approval_rule")[:1])
        )
        .values(
            "pk",
            "approval_policy",
            "approval_rule",
            "side_effect",
            "approval_timeout_seconds",
            "approval_on_expiry",
            "override",
            "override_rule",
        )
    )
    approvals = {}
    for row in rows:
        policy, rule = effective_policy(
            tool_policy=row["approval_policy"],
            tool_rule=row["approval_rule"],
            side_effect=row["side_effect"],
            override=row["override"] or AgentTool.Approval.INHERIT,
            override_rule=row["override_rule"] or "",
        )
        approvals[row["pk"]] = {
            "policy": policy,
            "rule": rule,
            "timeout_seconds": row["approval_timeout_seconds"],
            "on_expiry": row["approval_on_expiry"],
        }
    return approvals


def tools_in_force(*, snapshot: AgentSnapshot, names: Iterable[str]) -> dict[str, ToolSpec]:
    """The snapshot's tools by name, those named with the approval in force now: the stricter of
    the pinned one and the tool's current one (tools.approval_policy.approval_stricter). Read
    only for tools that could be tightened (a tool, not an agent, whose pinned policy is not
    "always"): a step whose calls cannot ask more than they do reads nothing."""
    tools = snapshot_tools(snapshot)
    named = [tools[name] for name in set(names) if name in tools]
    ids = [
        spec["id"] for spec in named if spec["id"] is not None and spec["approval"]["policy"] != ApprovalPolicy.ALWAYS
    ]
    if not ids:
        return tools
    current = tool_approvals_now(agent_id=snapshot["agent"]["id"], tool_ids=ids)
    for spec in named:
        approval = approval_stricter(spec["approval"], current.get(spec["id"]))
        if approval is not spec["approval"]:
            # A copy: the snapshot is shared by the process's steps (engine.snapshots).
            tools[spec["name"]] = {**spec, "approval": approval}
    return tools


def tool_live_approvals(*, tool: ToolDefinition) -> list[LiveApproval]:
    """How every version live traffic runs applies `tool`'s approval (tools.approval_policy.
    LiveApproval): each agent's published version and canary candidate that pin the tool, and
    the draft of each agent never published that has the tool (its calls pin what is current)."""
    agents = (
        Agent.objects.filter(
            Q(published_version__isnull=False) | Q(canary_version__isnull=False) | Q(agent_tools__tool=tool)
        )
        .select_related("published_version", "canary_version")
        .distinct()
        .order_by("name")
    )
    found = []
    for agent in agents:
        live = [("published", agent.published_version), ("canary", agent.canary_version)]
        pinned = [(role, version, _pinned_approval(version.snapshot, tool.pk)) for role, version in live if version]
        pinned = [(role, version, approval) for role, version, approval in pinned if approval is not None]
        current = tool_approvals_now(agent_id=agent.pk, tool_ids=[tool.pk]).get(tool.pk)
        if agent.published_version_id is None and current is not None:
            link = AgentTool.objects.filter(agent=agent, tool=tool, enabled=True).exists()
            pinned += [("draft", None, current)] if link and tool.is_active else []
        found += [
            LiveApproval(
                agent=agent.name,
                role=role,
                number=version.number if version else None,
                pinned=approval,
                current=current,
                effective=approval_stricter(approval, current),
            )
            for role, version, approval in pinned
        ]
    return found


def _pinned_approval(snapshot: dict, tool_id: int) -> dict | None:
    try:
        tools = snapshot_parse(snapshot)["tools"]
    except SnapshotInvalid:
        return None
    return next((spec["approval"] for spec in tools if spec.get("id") == tool_id), None)
