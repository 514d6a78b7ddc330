"""Remote agent tools: one A2A message to another agent per call (tools.remote_agents).

The card, skill and credentials are read from the live row, like an HTTP tool's secrets: the
credentials go only to the agent the run's snapshot names, so after an operator points a tool
at another card, runs pinned to the old one cannot send the new agent's credentials there.
"""

from django.utils.translation import gettext as _

from tools.executors.live import live_tool
from tools.models import secret_mapping
from tools.registry import ToolContext, ToolError
from tools.remote_agents import RemoteCall, remote_call


def load(spec: dict, live: dict | None = None) -> RemoteCall:
    row = live_tool(spec, "a2a_card_url", "a2a_card", "a2a_skill", "a2a_secret_headers")
    if row["a2a_card_url"] != spec["a2a"]["card_url"] or row["a2a_skill"] != spec["a2a"]["skill"]:
        raise ToolError(
            _("an operator pointed it at another agent after this run started; answer without it."),
            detail=f"snapshot card {spec['a2a']['card_url']} ({spec['a2a']['skill']}) differs from the live "
            f"{row['a2a_card_url']} ({row['a2a_skill']})",
        )
    if not row["a2a_card"]:
        raise ToolError(_("its agent card has not been fetched; an operator must refresh it."))
    return RemoteCall(
        card=row["a2a_card"],
        skill=row["a2a_skill"],
        headers=secret_mapping(row["a2a_secret_headers"] or ""),
        timeout_seconds=float(spec["timeout_seconds"]),
    )


def run(*, spec: dict, arguments: dict, ctx: ToolContext, loaded: RemoteCall):
    return remote_call(loaded, arguments, report=ctx.report, cancelled=ctx.cancelled)
