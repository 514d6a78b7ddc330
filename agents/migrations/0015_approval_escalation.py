import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0014_agent_memory_embedding_model'),
    ]

    operations = [
        migrations.AddField(
            model_name='agent',
            name='approval_escalate_after_minutes',
            field=models.PositiveIntegerField(blank=True, help_text='An approval still pending this many minutes after it was requested is escalated once: the webhooks marked as escalation channels (chat groups, email addresses) are told. Empty: no escalation.', null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(10080)], verbose_name='escalate approvals after (minutes)'),
        ),
    ]
