"""The test OpenID Connect provider in a process of its own (its settings: settings.py here).

OIDCProvider(...) generates an RS256 key, starts `python -m tests.support.oidc_provider.process`
on a free port with its own SQLite file, and returns once its discovery document answers; the
process migrates, registers one confidential client and the people given (with their groups),
then serves with Django's development server. stop() ends it."""

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.waits import wait_for

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OIDCProvider:
    def __init__(self, *, client_id: str, client_secret: str, redirect_uris: list[str], people: list[dict]):
        self.folder = Path(tempfile.mkdtemp(prefix="agentry-oidc-provider-"))
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_file = self.folder / "key.pem"
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.url}/o"
        seed = {
            "client": {"id": client_id, "secret": client_secret, "redirect_uris": redirect_uris},
            "people": people,
        }
        env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "AGENTRY_", "OIDC_"))}
        env.update(
            DJANGO_SETTINGS_MODULE="tests.support.oidc_provider.settings",
            OIDC_PROVIDER_PORT=str(self.port),
            OIDC_PROVIDER_DB=str(self.folder / "provider.sqlite3"),
            OIDC_PROVIDER_KEY=str(key_file),
            OIDC_PROVIDER_SEED=json.dumps(seed),
        )
        self.log = self.folder / "provider.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.oidc_provider.process"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_for(self._ready, timeout=60, interval=0.2, message=f"the OIDC provider (log: {self.log})")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the OIDC provider exited: {self.log.read_text()[-3000:]}")
        try:
            return requests.get(f"{self.issuer}/.well-known/openid-configuration", timeout=2).ok
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def main() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    from django.contrib.auth.models import Group, User
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    seed = json.loads(os.environ["OIDC_PROVIDER_SEED"])
    client = seed["client"]
    Application.objects.create(
        name="Agentry",
        client_id=client["id"],
        client_secret=client["secret"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(client["redirect_uris"]),
        post_logout_redirect_uris=" ".join(
            uri.replace("/oidc/callback/", "/admin/login/") for uri in client["redirect_uris"]
        ),
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=False,
    )
    for person in seed["people"]:
        user = User.objects.create_user(person["username"], email=person["email"], password=person["password"])
        user.groups.set(Group.objects.get_or_create(name=name)[0] for name in person["groups"])
    call_command("runserver", f"127.0.0.1:{os.environ['OIDC_PROVIDER_PORT']}", use_reloader=False, skip_checks=True)


if __name__ == "__main__":
    main()
