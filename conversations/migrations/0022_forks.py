import django.db.models.deletion
from django.db import migrations, models

from platform_site.migration_ops import AddIndexOnline


class Migration(migrations.Migration):
    # The index on run is built concurrently on PostgreSQL (platform_site.migration_ops), which
    # cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("agents", "0015_approval_escalation"),
        ("conversations", "0021_approval_escalation"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="run",
            options={
                "ordering": ["-created_at"],
                "permissions": [
                    ("operate_run", "Can cancel, requeue and retry runs"),
                    ("export_run", "Can export runs with their audit rows"),
                    ("fork_run", "Can fork runs and replay them against a version"),
                ],
                "verbose_name": "run",
                "verbose_name_plural": "runs",
            },
        ),
        migrations.AddField(
            model_name="llmcall",
            name="copied",
            field=models.BooleanField(default=False, verbose_name="copied"),
        ),
        migrations.AddField(
            model_name="run",
            name="fork_change",
            field=models.JSONField(blank=True, editable=False, null=True, verbose_name="fork change"),
        ),
        migrations.AddField(
            model_name="run",
            name="fork_step",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True, verbose_name="fork step"),
        ),
        migrations.AddField(
            model_name="run",
            name="forked_from",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="forks",
                to="conversations.run",
                verbose_name="forked from",
            ),
        ),
        migrations.AddField(
            model_name="toolinvocation",
            name="copied",
            field=models.BooleanField(default=False, verbose_name="copied"),
        ),
        AddIndexOnline(
            model_name="run",
            index=models.Index(
                condition=models.Q(("forked_from__isnull", False)), fields=["forked_from"], name="run_forked_from_idx"
            ),
        ),
    ]
