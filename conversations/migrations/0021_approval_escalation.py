from django.db import migrations, models

import agents.models


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
            name='email_to',
            field=models.TextField(blank=True, default='', help_text='Email format only: the addresses to send to, one per line or separated by commas.', validators=[agents.models.validate_email_list], verbose_name='email to'),
        ),
        migrations.AddField(
            model_name='webhook',
            name='escalation',
            field=models.BooleanField(default=False, help_text="Escalation channel: hears only approvals that waited past the agent's escalation time (and their decisions), not the ordinary requests.", verbose_name='escalation channel'),
        ),
        migrations.AlterField(
            model_name='webhook',
            name='format',
            field=models.CharField(choices=[('agentry', 'Agentry (signed JSON)'), ('feishu', 'Feishu / Lark custom bot'), ('dingtalk', 'DingTalk custom robot'), ('wecom', 'WeCom group robot'), ('slack', 'Slack incoming webhook'), ('email', 'Email (plain text)')], default='agentry', help_text="Agentry: the signed JSON described in the docs. A chat app: the message that app's bot documents, posted to its own host.", max_length=16, verbose_name='format'),
        ),
        migrations.AlterField(
            model_name='webhook',
            name='url',
            field=models.URLField(blank=True, max_length=500, verbose_name='URL'),
        ),
    ]
