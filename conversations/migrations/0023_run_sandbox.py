from django.db import migrations, models


class Migration(migrations.Migration):
    # Run.eval_tools held an evaluation's given results at first; forks and replays sandbox their
    # runs through the same field, so it is named for what it is.
    dependencies = [
        ("conversations", "0022_forks"),
    ]

    operations = [
        migrations.RenameField(model_name="run", old_name="eval_tools", new_name="sandbox"),
        migrations.AlterField(
            model_name="run",
            name="sandbox",
            field=models.JSONField(blank=True, editable=False, null=True, verbose_name="sandbox"),
        ),
    ]
