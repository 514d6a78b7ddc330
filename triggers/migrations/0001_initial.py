import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import platform_site.crypto


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('agents', '0014_agent_memory_embedding_model'),
        ('conversations', '0019_runs_by_creation'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Hook',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=200, verbose_name='name')),
                ('enabled', models.BooleanField(default=True, verbose_name='enabled')),
                ('secret', platform_site.crypto.EncryptedTextField(verbose_name='secret')),
                ('message', models.TextField(help_text="A template over the request's JSON payload.", verbose_name='message')),
                ('end_user', models.CharField(blank=True, default='', help_text='A template over the payload, or fixed.', max_length=200, verbose_name='end user')),
                ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created at')),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='hooks', to='agents.agent', verbose_name='agent')),
                ('owner', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='owner')),
            ],
            options={
                'verbose_name': 'hook',
                'verbose_name_plural': 'hooks',
                'ordering': ['agent', 'name'],
            },
        ),
        migrations.CreateModel(
            name='Schedule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=200, verbose_name='name')),
                ('enabled', models.BooleanField(default=True, help_text='A paused schedule does not fire.', verbose_name='enabled')),
                ('kind', models.CharField(choices=[('cron', 'Cron expression'), ('interval', 'Interval')], default='cron', max_length=16, verbose_name='kind')),
                ('cron', models.CharField(blank=True, help_text='Five fields: minute hour day month weekday.', max_length=120, verbose_name='cron expression')),
                ('interval_seconds', models.PositiveIntegerField(blank=True, null=True, verbose_name='interval (seconds)')),
                ('time_zone', models.CharField(default='Asia/Shanghai', max_length=64, verbose_name='time zone')),
                ('message', models.TextField(help_text="A template over the fire time and the schedule's variables.", verbose_name='message')),
                ('variables', models.JSONField(blank=True, default=dict, verbose_name='variables')),
                ('end_user', models.CharField(blank=True, default='', max_length=200, verbose_name='end user')),
                ('conversation_policy', models.CharField(choices=[('new', 'A new conversation each time'), ('same', 'One running conversation')], default='new', max_length=16, verbose_name='conversation')),
                ('overlap', models.CharField(choices=[('skip', 'Skip this fire'), ('queue', 'Queue it after the running one'), ('allow', 'Start it anyway')], default='skip', max_length=16, verbose_name='while the previous run is going')),
                ('missed', models.CharField(choices=[('once', 'Run once for the fires missed'), ('skip', 'Skip the fires missed')], default='once', max_length=16, verbose_name='after downtime')),
                ('next_fire_at', models.DateTimeField(blank=True, null=True, verbose_name='next fire')),
                ('last_fired_at', models.DateTimeField(blank=True, null=True, verbose_name='last fired')),
                ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created at')),
                ('updated_at', models.DateTimeField(auto_now=True, verbose_name='updated at')),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='schedules', to='agents.agent', verbose_name='agent')),
                ('conversation', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='conversations.conversation', verbose_name='running conversation')),
                ('owner', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='owner')),
            ],
            options={
                'verbose_name': 'schedule',
                'verbose_name_plural': 'schedules',
                'ordering': ['agent', 'name'],
            },
        ),
        migrations.CreateModel(
            name='ScheduleFire',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('fire_at', models.DateTimeField(verbose_name='fire time')),
                ('covers', models.PositiveIntegerField(default=1, verbose_name='fires covered')),
                ('outcome', models.CharField(choices=[('started', 'Started a run'), ('skipped_running', 'Skipped: the previous run was still going'), ('skipped_missed', 'Skipped: missed while the scheduler was down'), ('failed', 'Failed to start')], max_length=32, verbose_name='outcome')),
                ('detail', models.TextField(blank=True, default='', verbose_name='detail')),
                ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created at')),
                ('run', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='schedule_fire', to='conversations.run', verbose_name='run')),
                ('schedule', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='fires', to='triggers.schedule', verbose_name='schedule')),
            ],
            options={
                'verbose_name': 'schedule fire',
                'verbose_name_plural': 'schedule fires',
                'ordering': ['-fire_at'],
            },
        ),
        migrations.CreateModel(
            name='HookDelivery',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('delivery_id', models.CharField(max_length=200, verbose_name='delivery id')),
                ('signature', models.CharField(max_length=64, verbose_name='signature')),
                ('received_at', models.DateTimeField(auto_now_add=True, verbose_name='received at')),
                ('hook', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deliveries', to='triggers.hook', verbose_name='hook')),
                ('run', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='hook_delivery', to='conversations.run', verbose_name='run')),
            ],
            options={
                'verbose_name': 'hook delivery',
                'verbose_name_plural': 'hook deliveries',
                'ordering': ['-received_at'],
                'constraints': [models.UniqueConstraint(fields=('hook', 'delivery_id'), name='hook_delivery_once'), models.UniqueConstraint(fields=('hook', 'signature'), name='hook_request_once')],
            },
        ),
        migrations.AddIndex(
            model_name='schedule',
            index=models.Index(condition=models.Q(('enabled', True)), fields=['next_fire_at'], name='schedule_due_idx'),
        ),
        migrations.AddConstraint(
            model_name='schedulefire',
            constraint=models.UniqueConstraint(fields=('schedule', 'fire_at'), name='schedule_fire_once'),
        ),
    ]
