"""Writes on tool definitions: the built-in registry, MCP discovery and OpenAPI import."""

import hashlib
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from tools import openapi
from tools.approval_policy import ApprovalPolicy
from tools.mcp_sessions import MCPUnavailable, ServerConfig, pool
from tools.models import MCPServer, ToolDefinition, validate_parameters_schema
from tools.registry import registry
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace


def registered_tool_fields(tool) -> dict:
    """A registered tool's ToolDefinition fields that a sync keeps up to date."""
    return {
        "description": tool.description,
        "parameters": tool.parameters,
        "kind": ToolDefinition.Kind.PYTHON,
        "python_callable": tool.name,
        "side_effect": tool.side_effect,
        "idempotent": tool.idempotent,
        "timeout_seconds": tool.timeout_seconds,
        "max_result_chars": tool.max_result_chars,
    }


def registered_tool_row(tool, workspace_id: int) -> ToolDefinition:
    """A registered tool's ToolDefinition in a workspace, unsaved, as the sync creates it."""
    fields = registered_tool_fields(tool)
    return ToolDefinition(workspace_id=workspace_id, name=tool.name, approval_policy=tool.approval_policy, **fields)


def tool_definitions_sync_from_registry(*, workspace_ids: Iterable[int] | None = None) -> tuple[int, int]:
    """Create or update one python ToolDefinition per registered tool in each of these workspaces
    (None: every workspace), since an agent uses only its own workspace's tools. Returns
    (created, updated) over them all."""
    if workspace_ids is None:
        workspace_ids = Workspace.objects.order_by("pk").values_list("pk", flat=True)
    created = updated = 0
    for workspace_id in workspace_ids:
        for tool in registry.all():
            fields = registered_tool_fields(tool)
            _, was_created = ToolDefinition.objects.update_or_create(
                workspace_id=workspace_id,
                name=tool.name,
                defaults=fields,
                # The approval policy is the operator's to change: a sync sets it on creation only.
                create_defaults={**fields, "approval_policy": tool.approval_policy},
            )
            created += was_created
            updated += not was_created
    return created, updated


def workspace_builtin_tools(sender, workspace, **kwargs):
    """workspaces.models.workspace_built_ins: a workspace's built-in tools no agent uses, which go
    with it when it is deleted (one an agent uses keeps it, as the agent does)."""
    return ToolDefinition.objects.filter(workspace=workspace, kind=ToolDefinition.Kind.PYTHON, agent_tools=None)


def workspace_builtin_tools_create(sender, instance, created, raw=False, **kwargs) -> None:
    """post_save of Workspace: a new workspace gets the built-in tools, as the sync makes them,
    in one statement (it has no tool yet to update)."""
    if created and not raw:
        ToolDefinition.objects.bulk_create(registered_tool_row(tool, instance.pk) for tool in registry.all())


@dataclass
class ImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "name: why"

    def summary(self) -> str:
        parts = [f"{len(self.created)} created", f"{len(self.updated)} updated"]
        if self.deactivated:
            parts.append(f"{len(self.deactivated)} no longer offered (switched off): {', '.join(self.deactivated)}")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped: {'; '.join(self.skipped)}")
        return ", ".join(parts)


def prefixed_tool_name(prefix: str, name: str) -> str:
    """`<prefix>-<name>` within the providers' 64-character rule, still unique when shortened."""
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", name)
    full = f"{prefix}-{clean}" if prefix else clean
    if len(full) <= 64:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{full[: 64 - len(digest) - 1]}_{digest}"


def _object_schema(schema) -> dict:
    schema = dict(schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _side_effect_defaults(annotations) -> dict:
    """Defaults from MCP tool annotations, read with the spec's defaults for missing hints
    (not read-only, destructive). `annotations` is None when the server is not trusted."""
    read_only = bool(annotations and annotations.read_only_hint)
    destructive = annotations is None or annotations.destructive_hint is not False
    return {
        "side_effect": ToolDefinition.SideEffect.READ if read_only else ToolDefinition.SideEffect.WRITE,
        "approval_policy": ApprovalPolicy.AUTO
        if read_only
        else (ApprovalPolicy.ALWAYS if destructive else ApprovalPolicy.NEVER),
        "idempotent": read_only or bool(annotations and annotations.idempotent_hint),
    }


def _claimable(name: str, owned: dict, workspace_id: int) -> str | None:
    """Why a discovered name cannot be used, if it is taken by another tool of the workspace."""
    existing = ToolDefinition.objects.filter(workspace_id=workspace_id, name=name).first()
    if existing is not None and existing.pk not in owned:
        return f"{name}: the name is already used by another tool"
    return None


def mcp_server_discover(*, server: MCPServer) -> ImportReport:
    """Create or update one ToolDefinition per tool the server offers, named <server>-<tool>.

    Descriptions and schemas follow the server; the side effect, approval and idempotency
    an operator may have changed are set only when a tool is first seen.
    """
    try:
        tools = pool.list_tools(ServerConfig.from_server(server))
    except MCPUnavailable as exc:
        MCPServer.objects.filter(pk=server.pk).update(last_error=str(exc))
        raise
    report = ImportReport()
    owned = {tool.pk: tool for tool in ToolDefinition.objects.filter(mcp_server=server)}
    by_remote_name = {tool.mcp_tool_name: tool for tool in owned.values()}
    seen = set()
    with transaction.atomic():
        for remote in tools:
            name = prefixed_tool_name(server.name, remote.name)
            schema = _object_schema(remote.input_schema)
            try:
                validate_parameters_schema(schema)
            except ValidationError as exc:
                report.skipped.append(f"{name}: {' '.join(exc.messages)}")
                continue
            fields = {
                "name": name,
                "description": remote.description or remote.title or remote.name,
                "parameters": schema,
                "kind": ToolDefinition.Kind.MCP,
                "is_active": True,
            }
            existing = by_remote_name.get(remote.name)
            problem = _claimable(name, owned, server.workspace_id)
            if problem:
                report.skipped.append(problem)
                continue
            if existing is None:
                existing = ToolDefinition.objects.create(
                    workspace_id=server.workspace_id,
                    mcp_server=server,
                    mcp_tool_name=remote.name,
                    **fields,
                    **_side_effect_defaults(remote.annotations if server.trusted else None),
                )
                report.created.append(name)
            else:
                # Saved, not updated in bulk: what the server changed is a configuration change
                # (the audit hears saves).
                for field, value in fields.items():
                    setattr(existing, field, value)
                existing.save(update_fields=[*fields, "updated_at"])
                report.updated.append(name)
            seen.add(existing.pk)
        for tool in owned.values():
            if tool.pk not in seen and tool.is_active:
                tool.is_active = False
                tool.save(update_fields=["is_active", "updated_at"])
                report.deactivated.append(tool.name)
        MCPServer.objects.filter(pk=server.pk).update(discovered_at=timezone.now(), last_error="")
    return report


def _openapi_fields(operation: openapi.Operation) -> dict:
    return {
        "description": operation.description,
        "parameters": operation.parameters,
        "kind": ToolDefinition.Kind.HTTP,
        "http_method": operation.method,
        "http_url": operation.url,
        "http_query_params": operation.query_params,
        "http_body_argument": operation.body_argument,
        "is_active": True,
    }


def _openapi_plan(*, document: str, base_url: str, prefix: str) -> list[tuple[str, dict, openapi.Operation]]:
    operations = openapi.operations(openapi.load_document(document), base_url=base_url)
    return [(prefixed_tool_name(prefix, op.name), _openapi_fields(op), op) for op in operations]


def _changes_existing(tool: ToolDefinition | None, fields: dict) -> bool:
    return tool is not None and any(getattr(tool, key) != value for key, value in fields.items())


def tool_definitions_openapi_changes(
    *, document: str, base_url: str = "", prefix: str = "", workspace_id: int | None = None
) -> list[str]:
    """Names of the workspace's existing HTTP tools an import of this document would change
    (sorted; `workspace_id` None: the first workspace's, where such an import writes)."""
    plan = _openapi_plan(document=document, base_url=base_url, prefix=prefix)
    existing = ToolDefinition.objects.filter(
        workspace_id=workspace_id or default_workspace_id(),
        name__in=[name for name, _, _ in plan],
        kind=ToolDefinition.Kind.HTTP,
    )
    by_name = {tool.name: tool for tool in existing}
    return sorted(name for name, fields, _ in plan if _changes_existing(by_name.get(name), fields))


def tool_definitions_import_openapi(
    *,
    document: str,
    base_url: str = "",
    prefix: str = "",
    may_replace: Collection[str] | None = None,
    workspace_id: int | None = None,
) -> ImportReport:
    """One HTTP ToolDefinition per operation of an OpenAPI 3 document (JSON or YAML).

    GET operations are reads; the others are writes that need approval until an operator
    decides otherwise. Re-importing updates the tools of the same names; with `may_replace`
    given, only the existing tools it names may change (the others are skipped), since an
    import can point a tool that agents already use at another URL. New tools join
    `workspace_id` (the first workspace when None); names are the workspace's, so another
    workspace's tool of the same name is neither changed nor in the way.
    """
    workspace_id = workspace_id or default_workspace_id()
    report = ImportReport()
    with transaction.atomic():
        for name, fields, operation in _openapi_plan(document=document, base_url=base_url, prefix=prefix):
            existing = ToolDefinition.objects.select_for_update().filter(workspace_id=workspace_id, name=name).first()
            if existing is not None and existing.kind != ToolDefinition.Kind.HTTP:
                report.skipped.append(f"{name}: the name is already used by a {existing.kind} tool")
                continue
            if may_replace is not None and name not in may_replace and _changes_existing(existing, fields):
                report.skipped.append(f"{name}: it would change an existing tool, which was not confirmed")
                continue
            tool = existing or ToolDefinition(
                name=name,
                workspace_id=workspace_id,
                side_effect="read" if operation.method == "GET" else "write",
                approval_policy=ApprovalPolicy.AUTO if operation.method == "GET" else ApprovalPolicy.ALWAYS,
                idempotent=operation.method == "GET",
            )
            for key, value in fields.items():
                setattr(tool, key, value)
            try:
                tool.full_clean()
            except ValidationError as exc:
                report.skipped.append(f"{name}: {' '.join(exc.messages)}")
                continue
            tool.save()
            (report.updated if existing else report.created).append(name)
    return report
