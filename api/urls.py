"""/api/v1/: each resource module registers its views on this router."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from api import agents, conversations, evals, events, exports, runs
from api.approvals import ApprovalViewSet

router = DefaultRouter(trailing_slash=True)
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
    *router.urls,
]
