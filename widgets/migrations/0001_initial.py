import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import platform_site.crypto
import widgets.origins


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('agents', '0014_agent_memory_embedding_model'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Widget',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=200, verbose_name='name')),
                ('enabled', models.BooleanField(default=True, verbose_name='enabled')),
                ('secret', platform_site.crypto.EncryptedTextField(verbose_name='secret')),
                ('allowed_origins', models.TextField(blank=True, default='', help_text='The sites that may embed the chat, one a line, as <code>scheme://host[:port]</code>.', validators=[widgets.origins.origins_validate], verbose_name='allowed origins')),
                ('title', models.CharField(blank=True, default='', max_length=100, verbose_name='title')),
                ('greeting', models.TextField(blank=True, default='', max_length=1000, verbose_name='greeting')),
                ('language', models.CharField(choices=[('zh-hans', '简体中文'), ('en', 'English')], default='zh-hans', max_length=10, verbose_name='language')),
                ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created at')),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='widgets', to='agents.agent', verbose_name='agent')),
                ('owner', models.ForeignKey(blank=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='owner')),
            ],
            options={
                'verbose_name': 'chat widget',
                'verbose_name_plural': 'chat widgets',
                'ordering': ['agent', 'name'],
            },
        ),
    ]
