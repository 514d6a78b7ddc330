# A guardrail trigger is one row per rule and check, with the number of matches and the first few;
# a message keeps what models are shown of it once the input rules changed it.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('conversations', '0016_covered_indexes_and_run_status_id'),
    ]

    operations = [
        migrations.AddField(
            model_name='guardrailtrigger',
            name='count',
            field=models.PositiveIntegerField(default=1, verbose_name='matches'),
        ),
        migrations.AddField(
            model_name='guardrailtrigger',
            name='samples',
            field=models.JSONField(blank=True, default=list, verbose_name='first matches'),
        ),
        migrations.AddField(
            model_name='message',
            name='screened_content',
            field=models.TextField(blank=True, null=True, verbose_name='content as models see it'),
        ),
    ]
