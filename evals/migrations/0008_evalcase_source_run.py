import django.db.models.deletion
from django.db import migrations, models


def link_replayed_cases(apps, schema_editor):
    """A replay suite's cases were each named "run <id>" after a run its EvalSuite.replay lists:
    link those to their run, so forgetting the run's end user reaches them."""
    EvalCase = apps.get_model("evals", "EvalCase")
    Run = apps.get_model("conversations", "Run")
    named = {}
    for case in EvalCase.objects.filter(suite__replay__isnull=False, name__startswith="run ").select_related("suite"):
        run_id = case.name.removeprefix("run ")
        if run_id in (case.suite.replay or {}).get("runs", []):
            named[case] = run_id
    existing = {str(pk) for pk in Run.objects.filter(pk__in=set(named.values())).values_list("pk", flat=True)}
    for case, run_id in named.items():
        if run_id in existing:
            case.source_run_id = run_id
            case.save(update_fields=["source_run"])


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0023_run_sandbox"),
        ("evals", "0007_release_gate_latency_threshold"),
    ]

    operations = [
        migrations.AddField(
            model_name="evalcase",
            name="source_run",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="conversations.run",
                verbose_name="made from run",
            ),
        ),
        migrations.RunPython(link_replayed_cases, migrations.RunPython.noop),
    ]
