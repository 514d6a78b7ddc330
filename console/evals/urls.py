from django.urls import path

from console.evals import views

app_name = "evals"

urlpatterns = [
    path("compare/", views.compare, name="compare"),
]
