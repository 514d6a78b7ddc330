import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('evals', '0005_memory_cases'),
    ]

    operations = [
        migrations.AddField(
            model_name='evalcase',
            name='answer_equals',
            field=models.TextField(blank=True, default='', help_text='The answer must be exactly this text (leading and trailing whitespace aside).', verbose_name='answer equals'),
        ),
        migrations.AddField(
            model_name='evalcase',
            name='recorded_calls',
            field=models.JSONField(blank=True, default=list, help_text='[{"name": "tool name", "arguments": {…}, "result": "text"}, …]: what the replayed run\'s calls returned; the same call (same tool, same arguments) gets the same result, without being called.', verbose_name='recorded calls'),
        ),
        migrations.AddField(
            model_name='evalsuite',
            name='replay',
            field=models.JSONField(blank=True, editable=False, null=True, verbose_name='replay'),
        ),
        migrations.AddField(
            model_name='releasegate',
            name='replay_hours',
            field=models.PositiveIntegerField(default=0, help_text="0: off. Otherwise a release also needs the agent's production runs of the last this many hours replayed on the candidate and on the published version, with no regression beyond the thresholds.", validators=[django.core.validators.MaxValueValidator(720)], verbose_name='replay hours'),
        ),
    ]
