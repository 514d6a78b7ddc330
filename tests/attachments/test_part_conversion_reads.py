"""What the pre-step costs a step (engine.part_conversion): nothing for messages without parts,
one read for parts whose text was made before, which is then what the model is sent."""

import pytest

from agents.snapshot import snapshot_build
from attachments.models import PartText
from attachments.parts import part_of
from attachments.services import attachment_store
from conversations.models import Message
from engine.part_conversion import parts_converted
from tests.attachments import samples
from tests.support.factories import make_agent, make_user
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db


def test_a_step_without_parts_reads_nothing_and_one_with_known_text_reads_once(stored, django_assert_num_queries):
    agent, owner = make_agent(image_parts="ocr"), make_user()
    run = ledger_run(agent)
    snapshot = snapshot_build(agent=agent)
    typed = Message(conversation_id=run.conversation_id, run_id=run.pk, role="user", content="hi", order=0)
    with django_assert_num_queries(0):
        assert parts_converted(run=run, owner="w", snapshot=snapshot, messages=[typed], iteration=1) is None

    image = attachment_store(
        workspace=agent.workspace, uploaded_by=owner, owner=owner, data=samples.png(), name="a.png"
    )
    PartText.objects.create(attachment=image, method="ocr", text="Order 4417")
    sent = Message(
        conversation_id=run.conversation_id, run_id=run.pk, role="user", content="see", order=1, parts=[part_of(image)]
    )
    with django_assert_num_queries(1):
        converted = parts_converted(run=run, owner="w", snapshot=snapshot, messages=[typed, sent], iteration=1)
    assert converted == {str(image.pk): {"method": "ocr", "text": "Order 4417"}}
