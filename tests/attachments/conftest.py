import pytest


@pytest.fixture
def stored(settings, tmp_path):
    """The attachments storage in this test's own directory; returns the directory."""
    root = tmp_path / "attachments"
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(root)}},
    }
    return root


def files_in(root) -> list:
    return sorted(path for path in root.rglob("*") if path.is_file()) if root.exists() else []
