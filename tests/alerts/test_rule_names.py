"""A rule's name becomes an email subject: line breaks and other control characters are refused
in it, and a rule saved before that still gets its emails, with a subject on one line."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from alerts.models import AlertRule
from alerts.services import alert_rules_evaluate
from tests.alerts.conftest import make_rule, pending_approval
from tests.alerts.test_pages import _rule_form
from tests.support.factories import make_agent

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["Spend\r\nBcc: all@example.com", "Spend\nhigh", "tab\there", "nul\x00", "a\u2028b"])
def test_a_name_with_control_characters_is_refused(name):
    with pytest.raises(ValidationError) as raised:
        make_rule(kind="cost", name=name, threshold=5)
    assert "name" in raised.value.message_dict
    assert not AlertRule.objects.exists()


def test_the_admin_refuses_a_name_with_a_line_break(admin_client):
    response = admin_client.post(reverse("admin:alerts_alertrule_add"), _rule_form(name="Spend\r\nBcc: x@example.com"))
    assert response.status_code == 200 and not AlertRule.objects.exists()
    assert "control characters" in " ".join(response.context["adminform"].form.errors["name"])


def test_a_rule_saved_with_a_line_break_in_its_name_still_gets_its_emails(
    mailoutbox, sent_deliveries, django_capture_on_commit_callbacks
):
    now = timezone.now()
    rule = make_rule(kind="approval_age", name="Approvals", threshold=1, email_to="oncall@example.com")
    # As an older version saved it, before names were checked.
    AlertRule.objects.filter(pk=rule.pk).update(name="Approvals\r\nBcc: all@example.com")
    pending_approval(make_agent(), created_at=now - timedelta(minutes=5))

    with django_capture_on_commit_callbacks(execute=True):
        assert alert_rules_evaluate(now=now)["fired"] == 1
    [email] = mailoutbox
    assert email.to == ["oncall@example.com"] and email.bcc == []
    assert email.subject == "[Agentry alert] Approvals Bcc: all@example.com is firing"
