from django.urls import path

from widgets import views

urlpatterns = [
    path("widget.js", views.widget_script, name="widget-script"),
    path("chat/<uuid:widget_id>/", views.chat_page, name="widget-chat"),
]
