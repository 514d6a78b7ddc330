"""Attachments in an S3-compatible bucket (django-storages' S3 backend, as settings.py configures
it from AGENTRY_ATTACHMENTS_S3_*), against a real S3 server on loopback: moto's server mode,
spoken to over HTTP by boto3, not a mock of boto."""

import boto3
import pytest
from moto.server import ThreadedMotoServer

from attachments.services import attachment_delete, attachment_read, attachment_store
from tests.attachments import samples
from tests.support.factories import make_user
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db
BUCKET = "agentry-attachments"
KEYS = {"aws_access_key_id": "test-key", "aws_secret_access_key": "test-secret"}


@pytest.fixture(scope="module")
def s3_server():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_server, settings):
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", **KEYS)
    client.create_bucket(Bucket=BUCKET)
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "endpoint_url": s3_server,
                "region_name": "us-east-1",
                "access_key": KEYS["aws_access_key_id"],
                "secret_key": KEYS["aws_secret_access_key"],
                "location": "attachments",
                "addressing_style": "path",
                "default_acl": None,
                "querystring_auth": False,
                "file_overwrite": False,
            },
        },
    }
    yield client
    for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def _keys(client) -> list[str]:
    return [item["Key"] for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def test_an_attachment_round_trips_through_the_bucket(bucket, django_capture_on_commit_callbacks):
    workspace = Workspace.objects.get(pk=default_workspace_id())
    owner = make_user()
    attachment = attachment_store(
        workspace=workspace, uploaded_by=owner, owner=owner, data=samples.jpeg(exif=samples.gps_exif()), name="a.jpg"
    )
    assert _keys(bucket) == [f"attachments/{attachment.storage_key}"]
    stored = bucket.get_object(Bucket=BUCKET, Key=f"attachments/{attachment.storage_key}")["Body"].read()
    assert attachment_read(attachment=attachment) == stored and b"PhoneMaker" not in stored
    # The same bytes again: no second object.
    again = attachment_store(
        workspace=workspace, uploaded_by=owner, owner=owner, data=samples.jpeg(exif=samples.gps_exif()), name="b.jpg"
    )
    assert again.pk == attachment.pk and len(_keys(bucket)) == 1
    with django_capture_on_commit_callbacks(execute=True):
        attachment_delete(attachment=attachment)
    assert _keys(bucket) == []
