# A model config learns how its server counts tokens (agents.providers.calibration): the sums of
# reported and estimated tokens over its calls that report usage.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0011_guardrail_pattern_re2'),
    ]

    operations = [
        migrations.AddField(
            model_name='modelconfig',
            name='calibration_calls',
            field=models.PositiveIntegerField(default=0, editable=False, verbose_name='calibration calls'),
        ),
        migrations.AddField(
            model_name='modelconfig',
            name='completion_tokens_estimated',
            field=models.BigIntegerField(default=0, editable=False, verbose_name='completion tokens estimated'),
        ),
        migrations.AddField(
            model_name='modelconfig',
            name='completion_tokens_reported',
            field=models.BigIntegerField(default=0, editable=False, verbose_name='completion tokens reported'),
        ),
        migrations.AddField(
            model_name='modelconfig',
            name='prompt_tokens_estimated',
            field=models.BigIntegerField(default=0, editable=False, verbose_name='prompt tokens estimated'),
        ),
        migrations.AddField(
            model_name='modelconfig',
            name='prompt_tokens_reported',
            field=models.BigIntegerField(default=0, editable=False, verbose_name='prompt tokens reported'),
        ),
    ]
