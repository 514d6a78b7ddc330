from django.db import migrations

MODELS = ("webhook", "webhookdelivery", "webhookattempt")


def _relabel(apps, source: str, target: str) -> None:
    """The moved models' content types follow them, with their permissions (change_webhook…)
    and every group and user holding those: a new installation has none yet (post_migrate
    creates them), an upgraded one keeps its grants under the new app's label."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not ContentType.objects.filter(app_label=target, model=model).exists():
            ContentType.objects.filter(app_label=source, model=model).update(app_label=target)
    ContentType.objects.clear_cache()


def forwards(apps, schema_editor):
    _relabel(apps, "conversations", "notifications")


def backwards(apps, schema_editor):
    _relabel(apps, "notifications", "conversations")


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("notifications", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
