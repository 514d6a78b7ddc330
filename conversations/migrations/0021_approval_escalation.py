from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('conversations', '0020_webhook_chat_formats'),
    ]

    operations = [
        migrations.AddField(
            model_name='approval',
            name='escalated_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='escalated at'),
        ),
        migrations.AddField(
            model_name='webhook',
            name='escalation',
            field=models.BooleanField(default=False, help_text="Escalation channel: hears only approvals that waited past the agent's escalation time (and their decisions), not the ordinary requests.", verbose_name='escalation channel'),
        ),
    ]
