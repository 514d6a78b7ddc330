from django.urls import path

from console.monitoring import attachments, views
from console.playground import views as playground

app_name = "monitoring"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("panel/", views.dashboard_panel, name="panel"),
    path("data.json", views.dashboard_data, name="data"),
    path("agents/<slug:slug>/", views.agent_page, name="agent"),
    path("conversations/<uuid:conversation_id>/", views.conversation_thread_page, name="conversation"),
    path("agents/<slug:slug>/playground/", playground.playground_page, name="playground"),
    path("agents/<slug:slug>/playground/send/", playground.playground_send_view, name="playground-send"),
    path("agents/<slug:slug>/playground/save/", playground.playground_save_view, name="playground-save"),
    path("agents/<slug:slug>/playground/eval/", playground.playground_eval_view, name="playground-eval"),
    path("agents/<slug:slug>/release/", views.agent_release, name="agent-release"),
    path("agents/<slug:slug>/online/", views.agent_online_page, name="agent-online"),
    path("runs/<uuid:run_id>/", views.run_timeline_page, name="run"),
    path("runs/<uuid:run_id>/timeline.json", views.run_timeline_json, name="run-json"),
    path("runs/<uuid:run_id>/events.json", views.run_events_json, name="run-events"),
    # Before the actions: "eval-case" and "compare" would read as ones.
    path("runs/<uuid:run_id>/eval-case/", views.run_eval_case, name="run-eval-case"),
    path("runs/<uuid:run_id>/compare/", views.run_compare, name="run-compare"),
    path("runs/<uuid:run_id>/fork/<int:step>/", views.run_fork_post, name="run-fork"),
    path("runs/<uuid:run_id>/<slug:action>/", views.run_action, name="run-action"),
    path("attachments/<uuid:attachment_id>/", attachments.attachment_download, name="attachment-download"),
    path("try/", views.try_agent, name="try"),
    path("try/send/", views.try_agent_send, name="try-send"),
    path("try/attachments/", views.try_agent_attach, name="try-attach"),
]
