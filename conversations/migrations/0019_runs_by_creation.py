from django.db import migrations, models

from platform_site.migration_ops import AddIndexOnline


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY on PostgreSQL: a ledger of millions of runs keeps taking writes
    # while these are built (platform_site.migration_ops).
    atomic = False

    dependencies = [
        ("agents", "0014_agent_memory_embedding_model"),
        ("conversations", "0018_end_users_and_feedback"),
    ]

    operations = [
        AddIndexOnline(
            model_name="run",
            index=models.Index(fields=["created_at"], name="run_created_idx"),
        ),
        AddIndexOnline(
            model_name="run",
            index=models.Index(fields=["agent", "created_at"], name="run_agent_created_idx"),
        ),
    ]
