"""Review queues are configured here (the usual add/change/delete permissions); items and labels
are read-only rows written by the fill and the reviewers (console.reviews)."""

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from platform_site.admin_mixins import JSONInputAdminMixin, ReadOnlyAdminMixin
from reviews.models import ReviewItem, ReviewLabel, ReviewQueue
from workspaces.admin_scope import WorkspaceScopedAdmin


@admin.register(ReviewQueue)
class ReviewQueueAdmin(JSONInputAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["name", "agent", "reviews_per_run", "sample_rate", "enabled", "filled_until"]
    list_filter = ["enabled", "agent"]
    list_select_related = ["agent"]
    search_fields = ["name"]
    fieldsets = [
        (None, {"fields": ["name", "agent", "enabled", "reviews_per_run", "guidelines", "rubric"]}),
        (
            _("Which runs enter"),
            {
                "fields": [
                    "on_negative_feedback",
                    "score_below",
                    "score_evaluator",
                    "on_guardrail_hit",
                    "on_tool_error",
                    "sample_rate",
                ]
            },
        ),
    ]


@admin.register(ReviewItem)
class ReviewItemAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["queue", "run", "reason", "state", "assigned_to", "created_at"]
    list_filter = ["state", "reason", "queue"]
    list_select_related = ["queue", "assigned_to"]
    show_full_result_count = False


@admin.register(ReviewLabel)
class ReviewLabelAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["item", "reviewer", "verdict", "created_at"]
    list_filter = ["verdict", "item__queue"]
    list_select_related = ["item__queue", "reviewer"]
    show_full_result_count = False
