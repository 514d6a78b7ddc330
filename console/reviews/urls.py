from django.urls import path

from console.reviews import views

app_name = "reviews"

urlpatterns = [
    path("", views.queue_list, name="queues"),
    path("<int:queue_id>/", views.queue_page, name="queue"),
    path("<int:queue_id>/next/", views.queue_next, name="next"),
    path("items/<int:item_id>/", views.item_page, name="item"),
    path("items/<int:item_id>/label/", views.item_label, name="label"),
    path("items/<int:item_id>/release/", views.item_release, name="release"),
    path("items/<int:item_id>/case/", views.item_case, name="case"),
]
