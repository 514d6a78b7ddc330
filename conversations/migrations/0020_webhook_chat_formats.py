from django.db import migrations, models

import platform_site.crypto


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0019_runs_by_creation"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhook",
            name="bot_secret",
            field=platform_site.crypto.EncryptedTextField(
                blank=True,
                default="",
                help_text="Feishu/Lark and DingTalk only: the bot's signing secret. Empty: messages are not signed.",
                verbose_name="bot signing secret",
            ),
        ),
        migrations.AddField(
            model_name="webhook",
            name="format",
            field=models.CharField(
                choices=[
                    ("agentry", "Agentry (signed JSON)"),
                    ("feishu", "Feishu / Lark custom bot"),
                    ("dingtalk", "DingTalk custom robot"),
                    ("wecom", "WeCom group robot"),
                    ("slack", "Slack incoming webhook"),
                ],
                default="agentry",
                help_text="Agentry: the signed JSON described in the docs. A chat app: the message that app's bot documents, posted to its own host.",
                max_length=16,
                verbose_name="format",
            ),
        ),
    ]
