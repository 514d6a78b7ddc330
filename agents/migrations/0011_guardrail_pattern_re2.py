# Guardrail patterns run on RE2: the pattern field's help says which syntax it takes; input rules
# check every message the requester wrote, and the side's label says so.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0010_usage_day_shards'),
    ]

    operations = [
        migrations.AlterField(
            model_name='guardrailrule',
            name='side',
            field=models.CharField(
                choices=[
                    ('input', 'input (every message the requester wrote)'),
                    ('output', "output (the model's final answer)"),
                    ('both', 'both'),
                ],
                default='both',
                max_length=8,
                verbose_name='side',
            ),
        ),
        migrations.AlterField(
            model_name='guardrailrule',
            name='pattern',
            field=models.CharField(
                blank=True,
                help_text=(
                    'Blocked pattern: a regular expression in RE2 syntax, which runs in time linear in the text: '
                    'no backreferences, lookahead or lookbehind, atomic groups or possessive quantifiers.'
                ),
                max_length=500,
                verbose_name='pattern',
            ),
        ),
    ]
