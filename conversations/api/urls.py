"""/api/v1/: each resource module registers its views on this router."""

from rest_framework.routers import DefaultRouter

from conversations.api.approvals import ApprovalViewSet

router = DefaultRouter(trailing_slash=True)
router.register("approvals", ApprovalViewSet, basename="approval")

urlpatterns = router.urls
