"""Errors are rolled up per agent, so the monitoring page shows a workspace its own. Rows rolled
up before keep no agent and are a superuser's only until the rollups rebuild their hours."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0017_workspace"),
        ("conversations", "0028_apitoken_workspace"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="errorhourly",
            name="error_hourly_unique",
        ),
        migrations.AddField(
            model_name="errorhourly",
            name="agent",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="agents.agent"
            ),
        ),
        migrations.AddConstraint(
            model_name="errorhourly",
            constraint=models.UniqueConstraint(
                fields=("hour", "agent", "source", "message"), name="error_hourly_agent_unique"
            ),
        ),
    ]
