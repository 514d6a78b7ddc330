"""/favicon.ico, which browsers ask for on every page: an icon, not a 404."""

import pytest


@pytest.mark.django_db
def test_the_favicon_is_served_to_anyone(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    # An ICO header (reserved 0, type 1 = icon) with one image.
    assert response.content[:6] == b"\x00\x00\x01\x00\x01\x00"
    assert "max-age=86400" in response["Cache-Control"]


@pytest.mark.django_db
def test_a_wrong_method_is_a_405_in_the_error_shape(client):
    response = client.post("/favicon.ico")
    assert response.status_code == 405
    assert "message" in response.json()
