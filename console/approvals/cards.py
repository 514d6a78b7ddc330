"""What an approver is shown for each approval: the excerpt, the arguments, the edit's diff."""

import json
from dataclasses import dataclass, field

from django.utils import timezone

from console.approvals.diff import arguments_diff
from conversations.models import Approval, Message
from tools.arguments import arguments_hash

EXCERPT_CHARS = 280


def _pretty(arguments) -> str:
    return json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True)


@dataclass
class ApprovalCard:
    """One approval as an approver sees it."""

    approval: Approval
    excerpt: str
    original_json: str
    approved_json: str
    edited: bool
    diff: list
    age_seconds: int
    seconds_left: int | None
    # A failed edit shown again with its errors, so the person loses nothing they typed.
    edit_text: str = ""
    edit_errors: list = field(default_factory=list)

    @property
    def tool_name(self) -> str:
        return self.approval.invocation.tool_name

    @property
    def description(self) -> str:
        tool = self.approval.invocation.tool
        return tool.description if tool else ""


def approval_cards(*, approvals, now=None) -> list[ApprovalCard]:
    approvals = list(approvals)
    now = now or timezone.now()
    excerpts = {}
    for run_id, content in (
        Message.objects.filter(run_id__in={a.run_id for a in approvals}, role=Message.Role.USER)
        .order_by("-order")
        .values_list("run_id", "content")
    ):
        excerpts[run_id] = content  # ordered newest first, so the run's first user message wins
    cards = []
    for approval in approvals:
        original = approval.invocation.arguments or {}
        edited = approval.arguments_hash != arguments_hash(original)
        excerpt = excerpts.get(approval.run_id, "")
        if len(excerpt) > EXCERPT_CHARS:
            excerpt = excerpt[:EXCERPT_CHARS].rstrip() + "…"
        cards.append(
            ApprovalCard(
                approval=approval,
                excerpt=excerpt,
                original_json=_pretty(original),
                approved_json=_pretty(approval.arguments),
                edited=edited,
                diff=arguments_diff(original, approval.arguments) if edited else [],
                age_seconds=int((now - approval.created_at).total_seconds()),
                seconds_left=int((approval.expires_at - now).total_seconds()) if approval.expires_at else None,
            )
        )
    return cards
