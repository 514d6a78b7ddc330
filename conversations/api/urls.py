"""/api/v1/: each resource module registers its views on this router."""

from rest_framework.routers import DefaultRouter

router = DefaultRouter(trailing_slash=True)

urlpatterns = router.urls
