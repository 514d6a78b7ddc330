from django.urls import path

from chatbots import views

urlpatterns = [
    path("chatbots/<uuid:channel_id>/", views.chat_callback, name="chat-callback"),
]
