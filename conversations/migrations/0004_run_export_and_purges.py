import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0003_agent_retention"),
        ("conversations", "0003_run_status_index_hot_updates"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="RunPurge",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("agent_slug", models.CharField(max_length=100)),
                ("retention_days", models.PositiveIntegerField()),
                ("cutoff", models.DateTimeField()),
                ("counts", models.JSONField(default=dict)),
                ("policy_set_by_username", models.CharField(blank=True, default="", max_length=150)),
                ("policy_set_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "agent",
                    models.ForeignKey(
                        null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to="agents.agent"
                    ),
                ),
                (
                    "policy_set_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "run purge",
                "verbose_name_plural": "run purges",
                "ordering": ["-created_at"],
            },
        ),
        migrations.AlterModelOptions(
            name="run",
            options={
                "ordering": ["-created_at"],
                "permissions": [
                    ("operate_run", "Can cancel, requeue and retry runs"),
                    ("export_run", "Can export runs with their audit rows"),
                ],
            },
        ),
        migrations.AddIndex(
            model_name="runrequest",
            index=models.Index(
                condition=models.Q(("idempotency_key", ""), _negated=True),
                fields=["created_at"],
                name="run_request_keyed_idx",
            ),
        ),
    ]
