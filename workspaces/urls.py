from django.urls import path

from workspaces import views

urlpatterns = [path("workspace/", views.workspace_switch, name="workspace-switch")]
