"""The first superuser is never created with a guessable password outside the loopback dev stack."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def test_without_a_password_the_command_refuses(monkeypatch):
    monkeypatch.delenv("AGENTRY_ADMIN_PASSWORD", raising=False)
    with pytest.raises(CommandError, match="Set AGENTRY_ADMIN_PASSWORD"):
        call_command("agentry_ensure_admin")
    assert not get_user_model().objects.exists()


def test_a_weak_password_is_refused(monkeypatch):
    monkeypatch.setenv("AGENTRY_ADMIN_USERNAME", "root")
    monkeypatch.setenv("AGENTRY_ADMIN_PASSWORD", "root")
    with pytest.raises(CommandError, match="too weak"):
        call_command("agentry_ensure_admin")
    assert not get_user_model().objects.exists()


def test_a_good_password_makes_the_superuser_once(monkeypatch):
    monkeypatch.setenv("AGENTRY_ADMIN_USERNAME", "ops")
    monkeypatch.setenv("AGENTRY_ADMIN_PASSWORD", "a long and unguessable phrase")
    call_command("agentry_ensure_admin")
    call_command("agentry_ensure_admin")
    (user,) = get_user_model().objects.all()
    assert user.username == "ops" and user.is_superuser
    assert user.check_password("a long and unguessable phrase")


def test_the_dev_stack_falls_back_to_its_documented_login(monkeypatch):
    monkeypatch.delenv("AGENTRY_ADMIN_PASSWORD", raising=False)
    monkeypatch.delenv("AGENTRY_ADMIN_USERNAME", raising=False)
    call_command("agentry_ensure_admin", dev_default=True)
    assert get_user_model().objects.get(username="admin").check_password("admin")
