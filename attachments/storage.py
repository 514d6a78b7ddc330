"""Where attachments' bytes live: the "attachments" storage of settings.STORAGES (the local file
system under AGENTRY_VAR_DIR, or an S3-compatible bucket; docs/attachments.md)."""

from django.core.files.storage import Storage, storages

STORAGE_ALIAS = "attachments"


def attachment_storage() -> Storage:
    # Looked up on each use, not kept at import: tests (and override_settings) swap the backend.
    return storages[STORAGE_ALIAS]
