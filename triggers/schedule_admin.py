"""The admin of schedules: edited with the usual model permissions; pausing and resuming are
changes (change_schedule). The fires are written by beat's tick only and shown on the schedule's
page, each linked to its run's timeline."""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.page_links import agent_column
from agents.selectors import agents_usable_by
from conversations.end_users import EndUserInvalid, end_user_clean
from platform_site.admin_mixins import JSONInputAdminMixin
from triggers.models import Schedule
from triggers.schedules import schedule_check, schedule_save, schedules_pause, schedules_resume
from workspaces.admin_scope import WorkspaceScopedAdmin

FIRES_SHOWN = 20
_CHECKED = ("agent", "name", "kind", "cron", "interval_seconds", "time_zone", "message", "variables")


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = "__all__"

    def clean_end_user(self):
        try:
            return end_user_clean(self.cleaned_data["end_user"])
        except EndUserInvalid as exc:
            raise ValidationError(str(exc), code="invalid") from None

    def clean(self):
        cleaned = super().clean()
        # Checked only once every field it reads is valid on its own (their errors are shown).
        if all(name in cleaned for name in _CHECKED):
            values = {name: cleaned[name] for name in _CHECKED}
            values["cron"] = values["cron"].strip()
            cleaned["cron"] = values["cron"]
            try:
                schedule_check(Schedule(**values))
            except ValidationError as exc:
                self.add_error(None, exc)
        return cleaned


@admin.register(Schedule)
class ScheduleAdmin(JSONInputAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    form = ScheduleForm
    list_display = ["name", "agent_link", "when", "enabled", "next_fire_at", "last_fired_at"]
    agent_link = agent_column()
    list_filter = ["enabled", "kind", "agent"]
    list_select_related = ["agent"]
    search_fields = ["name", "agent__name", "agent__slug"]
    readonly_fields = ["next_fire_at", "last_fired_at", "conversation", "owner", "latest_fires"]
    fieldsets = [
        (None, {"fields": ["name", "agent", "enabled"]}),
        (gettext_lazy("When"), {"fields": ["kind", "cron", "interval_seconds", "time_zone"]}),
        (gettext_lazy("What"), {"fields": ["message", "variables"]}),
        (gettext_lazy("Conversation"), {"fields": ["conversation_policy", "end_user", "conversation", "owner"]}),
        (gettext_lazy("Policies"), {"fields": ["overlap", "missed"]}),
        (gettext_lazy("Fires"), {"fields": ["next_fire_at", "last_fired_at", "latest_fires"]}),
    ]
    actions = ["pause", "resume"]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "agent":
            # A schedule talks to its agent as the one who made it: only agents they may use.
            kwargs["queryset"] = agents_usable_by(user=request.user).order_by("name")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description=gettext_lazy("when"))
    def when(self, obj):
        if obj.kind == Schedule.Kind.CRON:
            return f"{obj.cron} ({obj.time_zone})"
        return _("every %(seconds)s s") % {"seconds": obj.interval_seconds}

    @admin.display(description=gettext_lazy("latest fires"))
    def latest_fires(self, obj):
        if obj.pk is None:
            return "-"
        fires = list(obj.fires.order_by("-fire_at")[:FIRES_SHOWN])
        if not fires:
            return _("No fires yet.")
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    fire.fire_at.isoformat(timespec="seconds"),
                    fire.get_outcome_display(),
                    fire.covers,
                    format_html('<a href="{}">{}</a>', reverse("monitoring:run", args=[fire.run_id]), _("timeline"))
                    if fire.run_id
                    else "-",
                    fire.detail,
                )
                for fire in fires
            ),
        )
        return format_html(
            '<table class="schedule-fires"><thead><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th>'
            "</tr></thead><tbody>{}</tbody></table>",
            _("fire time"),
            _("outcome"),
            _("fires covered"),
            _("run"),
            _("detail"),
            rows,
        )

    def save_model(self, request, obj, form, change):
        if obj.owner_id is None:
            obj.owner = request.user  # the runs' conversations are the schedule maker's
        schedule_save(schedule=obj)

    @admin.action(description=gettext_lazy("Pause selected schedules"), permissions=["change"])
    def pause(self, request, queryset):
        schedules = list(queryset.filter(enabled=True))
        count = schedules_pause(schedules=schedules)
        for schedule in schedules:
            self.log_change(request, schedule, [{"changed": {"fields": ["enabled"]}}])
        self.message_user(request, _("Paused %(count)s schedules.") % {"count": count})

    @admin.action(description=gettext_lazy("Resume selected schedules"), permissions=["change"])
    def resume(self, request, queryset):
        schedules = list(queryset.filter(enabled=False))
        count = schedules_resume(schedules=schedules)
        for schedule in schedules:
            self.log_change(request, schedule, [{"changed": {"fields": ["enabled"]}}])
        self.message_user(request, _("Resumed %(count)s schedules.") % {"count": count})
