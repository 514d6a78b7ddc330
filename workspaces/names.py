"""Configuration names are unique in their workspace, not across the installation.

A tool, MCP server, model config, knowledge base, eval suite or alert rule is named for the people
of its workspace: another workspace may use the same name (the built-in tools exist in every
workspace under their registry names), and a name taken elsewhere is neither refused nor
confirmed. Agent slugs stay installation-wide: they are the addresses of the API and `/v1`."""

from django.db import models
from django.utils.translation import gettext_lazy as _

NAME_TAKEN = _("This name is already used in this workspace.")


def name_unique_in_workspace(name: str) -> models.UniqueConstraint:
    """The constraint of a model whose `name` is unique per workspace (`name`: the constraint's)."""
    return models.UniqueConstraint(fields=["workspace", "name"], name=name, violation_error_message=NAME_TAKEN)
