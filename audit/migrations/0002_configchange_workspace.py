"""Each configuration change gets the workspace of its object: the object's own where it still
exists, else its agent's, else the first workspace (an upgraded installation has only that one)."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery
from django.db.models.functions import Cast

# The path from each model audited before workspaces to its workspace (a historical model has
# no `workspace_path`): these models as this migration's dependencies leave them.
WORKSPACE_PATHS = {
    "agents.agenttool": "agent__workspace",
    "agents.agentdelegate": "parent__workspace",
    "agents.agentversion": "agent__workspace",
    "agents.agentrelease": "agent__workspace",
    "evals.evalcase": "suite__workspace",
    "evals.releasegate": "agent__workspace",
    # Migrating forward again: the rows a workspace's own changes wrote.
    "workspaces.workspace": "id",
}


def workspaces_fill(apps, schema_editor):
    ConfigChange = apps.get_model("audit", "ConfigChange")
    Agent = apps.get_model("agents", "Agent")
    Workspace = apps.get_model("workspaces", "Workspace")
    unset = ConfigChange.objects.filter(workspace__isnull=True)
    types = unset.values_list("content_type__app_label", "content_type__model", "content_type_id").distinct()
    for app_label, model_name, type_id in types:
        try:
            model = apps.get_model(app_label, model_name)
        except LookupError:
            continue
        path = WORKSPACE_PATHS.get(f"{app_label}.{model_name}", "workspace")
        try:
            model._meta.get_field(path.split("__")[0])
        except Exception:  # noqa: BLE001 - FieldDoesNotExist: a model with no workspace
            continue
        owner = model._base_manager.filter(pk=Cast(OuterRef("object_id"), model._meta.pk)).values(path)[:1]
        unset.filter(content_type_id=type_id).update(workspace_id=Subquery(owner))
    owner = Agent._base_manager.filter(pk=OuterRef("agent_id")).values("workspace")[:1]
    unset.filter(agent_id__isnull=False).update(workspace_id=Subquery(owner))
    first = Workspace.objects.order_by("id").values_list("id", flat=True).first()
    if first is not None:
        unset.update(workspace_id=first)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
        ("workspaces", "0002_first_workspace"),
        ("agents", "0017_workspace"),
        ("alerts", "0005_alertrule_workspace"),
        ("conversations", "0028_apitoken_workspace"),
        ("evals", "0009_evalsuite_workspace"),
        ("knowledge", "0004_knowledgebase_workspace"),
        ("notifications", "0003_webhook_workspace"),
        ("tools", "0004_workspace"),
        ("triggers", "0004_workspace"),
        ("widgets", "0003_widget_workspace"),
    ]

    operations = [
        migrations.AddField(
            model_name="configchange",
            name="workspace",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="workspaces.workspace",
                verbose_name="workspace",
            ),
        ),
        migrations.AddIndex(
            model_name="configchange",
            index=models.Index(fields=["workspace", "-at"], name="config_change_workspace"),
        ),
        # The column goes with the field when migrating back: nothing to undo.
        migrations.RunPython(workspaces_fill, migrations.RunPython.noop),
    ]
