"""The embedded broker (platform_site.fs_broker): a consumer never reads a message its producer
is still writing, and kombu's own reading finds the files it writes. The kombu tests here fail
loudly when the surface the subclass relies on changes, or when kombu fixes its write itself."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.transport import filesystem

from platform_site import fs_broker

ROOT = Path(__file__).resolve().parent.parent.parent


def _connection(folder: Path, transport) -> Connection:
    options = {
        "data_folder_in": str(folder / "out"),
        "data_folder_out": str(folder / "out"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        # Kept in the test's folder rather than the machine's temporary directory.
        "store_processed": True,
    }
    for name in ("out", "processed"):
        (folder / name).mkdir(exist_ok=True)
    return Connection("filesystem://localhost/", transport=transport, transport_options=options)


@pytest.fixture
def paused_write(monkeypatch):
    """Holds every producer between opening its message and writing it, as a busy machine can."""
    started, release = threading.Event(), threading.Event()
    real_dumps = filesystem.dumps

    def slow_dumps(value):
        started.set()
        assert release.wait(10)
        return real_dumps(value)

    monkeypatch.setattr(filesystem, "dumps", slow_dumps)
    monkeypatch.setattr(fs_broker, "dumps", slow_dumps)
    return started, release


def _put_in_thread(channel, payload) -> threading.Thread:
    thread = threading.Thread(target=channel._put, args=("llm", payload))
    thread.start()
    return thread


def test_a_consumer_polling_during_a_write_sees_no_message_then_the_whole_one(tmp_path, paused_write):
    started, release = paused_write
    with _connection(tmp_path, fs_broker.Transport) as connection:
        channel = connection.default_channel
        writer = _put_in_thread(channel, {"body": "x" * 10_000})
        assert started.wait(10)
        with pytest.raises(Empty):
            channel._get("llm")
        release.set()
        writer.join(10)
        assert channel._get("llm") == {"body": "x" * 10_000}
        assert os.listdir(tmp_path / "out") == []


def test_kombus_own_write_still_hands_out_a_half_written_message(tmp_path, paused_write):
    """The bug fs_broker exists for. When this fails, kombu writes atomically itself: drop
    platform_site/fs_broker.py and its line in settings."""
    started, release = paused_write
    with _connection(tmp_path, filesystem.Transport) as connection:
        channel = connection.default_channel
        writer = _put_in_thread(channel, {"body": "x"})
        assert started.wait(10)
        try:
            with pytest.raises(json.JSONDecodeError):
                channel._get("llm")
        finally:
            release.set()
            writer.join(10)


def test_kombus_reader_finds_every_message_and_skips_unfinished_ones(tmp_path):
    with _connection(tmp_path, fs_broker.Transport) as connection:
        channel = connection.default_channel
        for number in range(5):
            channel._put("llm", {"n": number})
        # A write in progress: the temporary name is neither counted nor handed out.
        (tmp_path / "out" / f"{fs_broker.TEMP_PREFIX}abc{fs_broker.TEMP_SUFFIX}").write_bytes(b'{"n": ')
        assert channel._size("llm") == 5
        assert channel._size("maintenance") == 0
        # Ordered by the millisecond only, as kombu's own: messages of one millisecond in any order.
        assert sorted(channel._get("llm")["n"] for _ in range(5)) == [0, 1, 2, 3, 4]
        with pytest.raises(Empty):
            channel._get("llm")


def test_kombus_put_has_the_signature_and_file_name_the_subclass_copies(tmp_path):
    with _connection(tmp_path, filesystem.Transport) as connection:
        connection.default_channel._put("llm", {"n": 1}, priority=0)
    (written,) = os.listdir(tmp_path / "out")
    ours = fs_broker.message_filename("llm")
    # "<milliseconds>_<uuid4>.<queue>.msg": the same shape, so both sort together by time.
    assert written.partition(".")[2] == ours.partition(".")[2] == "llm.msg"
    assert len(written) == len(ours) and written.split("_")[0].isdigit()


def test_tasks_travel_through_it_with_kombus_producer_and_consumer(tmp_path):
    queue = Queue("llm", Exchange("llm", type="direct"), routing_key="llm")
    received = []
    with _connection(tmp_path, fs_broker.Transport) as connection:
        producer = Producer(connection.default_channel)
        for number in range(20):
            producer.publish({"n": number}, exchange=queue.exchange, routing_key="llm", declare=[queue])
        with Consumer(
            connection, [queue], callbacks=[lambda body, message: (received.append(body["n"]), message.ack())]
        ):
            while len(received) < 20:
                connection.drain_events(timeout=5)
    assert sorted(received) == list(range(20))


def test_the_settings_choose_it_for_the_embedded_broker(tmp_path):
    environment = {
        **os.environ,
        "CELERY_BROKER_URL": "filesystem://localhost/",
        "AGENTRY_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "platform_site.settings",
    }
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "from platform_site.celery import app\n"
            "with app.connection_for_write() as c: print(type(c.default_channel).__module__)",
        ],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert shown.stdout.strip() == "platform_site.fs_broker"
