from django.db import migrations, models
from django.db.models import Q

from platform_site.migration_ops import AddIndexOnline


def triggers_derive(apps, schema_editor):
    """What started the runs already written, where the ledger still says it; the rest stay
    "api" (the REST API, the default). A run the console's try page or a command started left no
    mark of it and reads as "api". Earlier rules win: each UPDATE touches only runs still "api"."""
    Run = apps.get_model("conversations", "Run")
    ScheduleFire = apps.get_model("triggers", "ScheduleFire")
    HookDelivery = apps.get_model("triggers", "HookDelivery")
    rules = [
        # A delegated run of a fork is sandboxed like the fork, but a delegation started it.
        ("delegation", Q(parent_run__isnull=False)),
        ("fork", Q(forked_from__isnull=False) | Q(sandbox__has_key="fork")),
        ("eval", Q(sandbox__isnull=False)),
        ("schedule", Q(pk__in=ScheduleFire.objects.filter(run__isnull=False).values("run_id"))),
        ("hook", Q(pk__in=HookDelivery.objects.filter(run__isnull=False).values("run_id"))),
        ("widget", Q(conversation__metadata__has_key="widget")),
        ("openai", Q(conversation__metadata__source="chat.completions")),
    ]
    for trigger, rule in rules:
        Run.objects.filter(rule, trigger="api").update(trigger=trigger)


class Migration(migrations.Migration):
    # The index on run is built concurrently on PostgreSQL (platform_site.migration_ops), which
    # cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("agents", "0015_approval_escalation"),
        ("conversations", "0023_run_sandbox"),
        ("triggers", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="trigger",
            field=models.CharField(
                choices=[
                    ("api", "REST API"),
                    ("openai", "OpenAI-compatible API (/v1)"),
                    ("widget", "chat widget"),
                    ("schedule", "schedule"),
                    ("hook", "inbound hook"),
                    ("console", "operator console"),
                    ("cli", "command line"),
                    ("fork", "fork"),
                    ("eval", "evaluation or replay"),
                    ("delegation", "delegation"),
                ],
                default="api",
                editable=False,
                max_length=20,
                verbose_name="trigger",
            ),
        ),
        migrations.RunPython(triggers_derive, migrations.RunPython.noop, elidable=True),
        AddIndexOnline(
            model_name="run",
            index=models.Index(fields=["trigger", "created_at"], name="run_trigger_created_idx"),
        ),
    ]
