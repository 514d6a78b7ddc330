"""/api/v1/: each resource module registers its views on this router."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from api import (
    agents,
    attachments,
    config_changes,
    conversations,
    end_users,
    evals,
    events,
    exports,
    memories,
    runs,
    widget,
)
from api.approvals import ApprovalViewSet
from api.erasure import EndUserErasureView
from api.feedback import RunFeedbackView
from api.forks import RunForkView
from api.hooks import HookView


class ApiRouter(DefaultRouter):
    """No `.json` twin of each route: nothing documents them, and a view that does not take DRF's
    `format` argument answered one with a 500 (a POST to .../decision.json). Content is chosen by
    the Accept header (or ?format=) on the documented routes."""

    include_format_suffixes = False


router = ApiRouter(trailing_slash=True)
router.register("agents", agents.AgentViewSet, basename="agent")
router.register("conversations", conversations.ConversationViewSet, basename="conversation")
router.register("runs", runs.RunViewSet, basename="run")
router.register("approvals", ApprovalViewSet, basename="approval")
router.register("eval-suites", evals.EvalSuiteViewSet, basename="eval-suite")
router.register("eval-runs", evals.EvalRunViewSet, basename="eval-run")

urlpatterns = [
    # Async (ASGI) view, outside DRF: a stream must not hold a thread while it waits.
    path("runs/<uuid:run_id>/events/", events.run_events, name="run-events"),
    # Before the router, whose runs/<pk>/ would take "export" for a run's id.
    path("runs/export/", exports.runs_export, name="runs-export"),
    path("config-changes/export/", config_changes.config_changes_export, name="config-changes-export"),
    path("runs/<uuid:run_id>/feedback/", RunFeedbackView.as_view(), name="run-feedback"),
    path("runs/<uuid:run_id>/fork/", RunForkView.as_view(), name="run-fork"),
    # <path:…>: an end user's id is the application's own and may hold a "/".
    path(
        "end-users/<path:end_user>/conversations/",
        end_users.EndUserConversationList.as_view(),
        name="end-user-conversations",
    ),
    path("end-users/<path:end_user>/runs/", end_users.EndUserRunList.as_view(), name="end-user-runs"),
    path("end-users/<path:end_user>/memories/", memories.EndUserMemoryList.as_view(), name="end-user-memories"),
    path(
        "end-users/<path:end_user>/memories/<uuid:pk>/",
        memories.EndUserMemoryDetail.as_view(),
        name="end-user-memory",
    ),
    path("end-users/<path:end_user>/", EndUserErasureView.as_view(), name="end-user"),
    path("attachments/", attachments.AttachmentUploadView.as_view(), name="attachments"),
    path("attachments/<uuid:attachment_id>/", attachments.AttachmentDetailView.as_view(), name="attachment"),
    path(
        "attachments/<uuid:attachment_id>/content/",
        attachments.AttachmentContentView.as_view(),
        name="attachment-content",
    ),
    # Signed by the hook's secret, not an API token (api.hooks).
    path("hooks/<uuid:hook_id>/", HookView.as_view(), name="hook"),
    # Authenticated by an end-user token the widget's secret signed, not an API token (api.widget).
    path(
        "widget/<uuid:widget_id>/conversations/",
        widget.WidgetConversationsView.as_view(),
        name="widget-conversations",
    ),
    path(
        "widget/<uuid:widget_id>/conversations/<uuid:conversation_id>/",
        widget.WidgetConversationView.as_view(),
        name="widget-conversation",
    ),
    path(
        "widget/<uuid:widget_id>/conversations/<uuid:conversation_id>/messages/",
        widget.WidgetMessagesView.as_view(),
        name="widget-messages",
    ),
    path("widget/<uuid:widget_id>/attachments/", widget.WidgetAttachmentsView.as_view(), name="widget-attachments"),
    path(
        "widget/<uuid:widget_id>/attachments/<uuid:attachment_id>/content/",
        widget.WidgetAttachmentContentView.as_view(),
        name="widget-attachment-content",
    ),
    path("widget/<uuid:widget_id>/runs/<uuid:run_id>/events/", widget.widget_run_events, name="widget-run-events"),
    *router.urls,
]
