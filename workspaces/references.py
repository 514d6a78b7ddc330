"""An object may refer only to objects of its own workspace: the one rule, checked here.

An agent cannot use another workspace's model config, tool, MCP server, knowledge base, guardrail
or delegate; a tool's MCP server, a schedule's, hook's, widget's or webhook's agent, an alert
rule's filters and an eval suite's agent are the object's workspace's. Each configuration model's
clean() calls `references_check(self)`, so the admin's forms (and their inline rows) and every
service that calls full_clean() refuse such a reference with the same message."""

from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from workspaces.access import obj_workspace_id, workspace_lookup
from workspaces.defaults import default_workspace_id

OTHER_WORKSPACE = _("Choose one of this workspace's objects.")


def same_workspace_check(owner_workspace_id: int | None, **related) -> None:
    """ValidationError naming every field whose object (a model instance, or None) belongs to a
    workspace other than `owner_workspace_id`. The message does not say which workspace."""
    errors = {}
    for field, obj in related.items():
        if obj is None or owner_workspace_id is None:
            continue
        workspace_id = obj_workspace_id(obj)
        if workspace_id is not None and workspace_id != owner_workspace_id:
            errors[field] = ValidationError(OTHER_WORKSPACE, code="other_workspace")
    if errors:
        raise ValidationError(errors)


def _owner_workspace_id(instance) -> int | None:
    """The workspace `instance` is (or will be) in: its own, or its parent's along its path. One
    saved without a workspace joins the first (workspaces.defaults), so it is checked against it."""
    *hops, _last = workspace_lookup(type(instance)).split("__")
    owner = instance
    for hop in hops:
        try:
            owner = getattr(owner, hop)
        except models.ObjectDoesNotExist:  # its parent is not chosen yet: the form says so
            return None
        if owner is None:
            return None
    return owner.workspace_id if owner.workspace_id is not None else default_workspace_id()


def references_check(instance) -> None:
    """Every foreign key of `instance` to a workspace's object must point into its workspace."""
    related = {}
    for field in instance._meta.concrete_fields:
        if not field.is_relation or field.name == "workspace" or workspace_lookup(field.related_model) is None:
            continue
        if getattr(instance, field.attname) is None:
            continue
        try:
            related[field.name] = getattr(instance, field.name)
        except models.ObjectDoesNotExist:  # a dangling id: the field's own validation says so
            continue
    if related:
        same_workspace_check(_owner_workspace_id(instance), **related)
