"""`agentry_chat` while a call waits for a person: it says what waits (a delegated run's call
too), where to decide it, and goes on waiting until the decision, then prints the outcome."""

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from conversations.models import Approval, Run
from demo.customer_service import CUSTOMER_SERVICE_QUESTIONS, ORDERS, ROUTER, customer_service_seed
from demo.orders import order_service_start
from engine.approvals import approval_decide

SITE = "https://agentry.example.com"
ORDER_QUESTION = CUSTOMER_SERVICE_QUESTIONS[1]  # its address change, in the order agent's run, asks


class DecidingOutput(io.StringIO):
    """The terminal, and a person who approves each call once it is printed as waiting."""

    def __init__(self, user):
        super().__init__()
        self.user = user
        self.printed_while_waiting = ""

    def flush(self) -> None:
        # The command flushes once it has said what waits (a pipe would hold the lines otherwise).
        for approval in Approval.objects.filter(status=Approval.Status.PENDING):
            if f"waiting for approval {approval.pk}:" in self.getvalue():
                self.printed_while_waiting = self.getvalue()
                approval_decide(approval_id=approval.pk, user=self.user, decision="approve", channel="admin")


@pytest.mark.e2e
def test_a_delegated_run_s_approval_is_printed_with_where_to_decide_it(worker, fake_llm):
    boss = get_user_model().objects.create_superuser("boss", password="x")
    url, server = order_service_start()
    try:
        customer_service_seed(llm_base_url=fake_llm.api_base, order_service_url=url, stream=False)
        out = DecidingOutput(boss)
        call_command("agentry_chat", ORDER_QUESTION, agent=ROUTER, timeout=90, url=SITE, stdout=out)
    finally:
        server.shutdown()
        server.server_close()

    root = Run.objects.get(parent_run=None)
    child = Run.objects.get(parent_run=root, agent__slug=ORDERS)
    approval = Approval.objects.get(run=child)
    waiting = out.printed_while_waiting
    assert f"waiting for approval {approval.pk}: change_address {{" in waiting
    assert f"(delegated run {child.pk} of {ORDERS}, called by run {root.pk})" in waiting
    assert f"decide at {SITE}/approvals/{approval.pk}/ (queue: {SITE}/approvals/)" in waiting
    assert f"or POST {SITE}/api/v1/approvals/{approval.pk}/decision/" in waiting
    assert "still waiting, up to" in waiting
    assert f"run {root.pk}: completed" not in waiting  # printed before the run went on

    printed = out.getvalue()
    assert f"run {root.pk}: completed" in printed
    assert "↳ delegated to" in printed and "[approved by boss]" in printed
