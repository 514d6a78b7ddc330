"""The roles of a workspace member and the Django permissions each one carries.

Roles are rules over the permissions the installed models declare (Django's add/change/delete/
view and each model's own), so a model added later is covered by the rule of its app without
editing a list here. The admin, the operator pages, the approval queue, the API and the CLI all
ask Django's `user.has_perm(...)`; workspaces.access answers it for the workspace the request
acts in."""

from functools import cache

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _


class Role(models.TextChoices):
    OWNER = "owner", _("owner")
    BUILDER = "builder", _("builder")
    OPERATOR = "operator", _("operator")
    APPROVER = "approver", _("approver")
    VIEWER = "viewer", _("viewer")
    # What every account had before workspaces: only the Django permissions given to the person
    # or their groups. Existing accounts join the first workspace with it, so an upgrade changes
    # nothing for them.
    CUSTOM = "custom", _("custom (the person's own Django permissions)")


# Apps whose objects live in a workspace (configuration, and the record through its agent).
WORKSPACE_APPS = (
    "agents",
    "tools",
    "conversations",
    "knowledge",
    "memory",
    "alerts",
    "evals",
    "triggers",
    "widgets",
    "notifications",
    "chatbots",
    "reviews",
    "attachments",
    "audit",
    "workspaces",
)

# What a builder shapes: agents (versions, releases, guardrails, routing rules), tools and MCP servers,
# knowledge, evals. Model configs hold provider keys: an owner's.
_BUILDER_MODELS = {
    "agents": {"agent", "agenttool", "agentdelegate", "agentversion", "agentrelease", "guardrailrule", "routingrule"},
    "tools": None,
    "knowledge": None,
    "evals": None,
    "reviews": {"reviewqueue"},
}
_BUILDER_EXTRA = {
    "agents.publish_agent",
    "agents.test_agent_version",
    "conversations.add_run",
    "reviews.review_run",
}
_OPERATOR_EXTRA = {
    "conversations.add_run",
    "conversations.operate_run",
    "conversations.fork_run",
    "conversations.export_run",
    "conversations.decide_approval",
    "conversations.change_runfeedback",
    "evals.add_evalrun",
    "reviews.review_run",
}
_APPROVER = {"conversations.decide_approval", "conversations.view_approval"}


def _declared() -> list[tuple[str, str, str]]:
    """(app label, model name, "app.codename") of every permission the workspace apps declare."""
    found = []
    for model in apps.get_models():
        opts = model._meta
        if opts.app_label not in WORKSPACE_APPS:
            continue
        codenames = [f"{action}_{opts.model_name}" for action in opts.default_permissions]
        codenames += [codename for codename, _label in opts.permissions]
        found += [(opts.app_label, opts.model_name, f"{opts.app_label}.{codename}") for codename in codenames]
    return found


@cache
def role_permissions(role: str | None) -> frozenset[str]:
    """The permissions a member with this role holds in their workspace (none for custom)."""
    declared = _declared()
    views = {perm for _app, _model, perm in declared if perm.split(".", 1)[1].startswith("view_")}
    if role == Role.OWNER:
        return frozenset(perm for _app, _model, perm in declared)
    if role == Role.BUILDER:
        shaped = {
            perm
            for app, model, perm in declared
            if app in _BUILDER_MODELS and (_BUILDER_MODELS[app] is None or model in _BUILDER_MODELS[app])
        }
        return frozenset(views | shaped | _BUILDER_EXTRA)
    if role == Role.OPERATOR:
        return frozenset(views | _OPERATOR_EXTRA)
    if role == Role.APPROVER:
        return frozenset(_APPROVER)
    if role == Role.VIEWER:
        return frozenset(views)
    return frozenset()


class Scope(models.TextChoices):
    """A token's narrower list: what it may touch, inside what its role allows."""

    RUNS = "runs", _("runs: conversations, messages, runs and their events")
    APPROVALS = "approvals", _("approvals: read and decide")
    MEMORIES = "memories", _("memories: read, correct and forget an end user's")
    ADMIN_READ = "admin-read", _("admin-read: read configuration and the ledger")


def validate_scopes(value) -> None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValidationError(_("Use a list of scope names."))
    unknown = sorted(set(value) - set(Scope.values))
    if unknown:
        raise ValidationError(
            _("Unknown scopes: %(unknown)s. Choose from: %(known)s.")
            % {"unknown": ", ".join(unknown), "known": ", ".join(Scope.values)}
        )


def scope_permissions(scopes) -> frozenset[str]:
    """The permissions a list of scopes allows (each within the token's role)."""
    declared = _declared()
    allowed: set[str] = set()
    for scope in scopes:
        if scope == Scope.RUNS:
            allowed |= {
                "conversations.add_run",
                "conversations.view_run",
                "conversations.view_conversation",
                "conversations.view_message",
                "conversations.operate_run",
                "conversations.add_runfeedback",
            }
        elif scope == Scope.APPROVALS:
            allowed |= _APPROVER
        elif scope == Scope.MEMORIES:
            allowed |= {perm for app, _model, perm in declared if app == "memory"}
            allowed.add("conversations.forget_end_user")
        elif scope == Scope.ADMIN_READ:
            allowed |= {perm for _app, _model, perm in declared if perm.split(".", 1)[1].startswith("view_")}
    return frozenset(allowed)
