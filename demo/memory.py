"""The demo's memory scene (`agentry_demo --memory`): one end user tells the memory demo agent
(demo.seed.demo_memory_seed) where they live, and later conversations of theirs use it.

Each question is a new conversation of the same end user, through the real queue: "我在成都"
(the extraction after the run adds "住在成都"), "明天天气如何？" (the run is shown that memory and
asks the weather for 成都 without asking where), "我搬到重庆了" (the extraction updates it to
"住在重庆") and "明天天气如何？" again (重庆).
"""

import time

from agents.models import Agent
from agents.snapshot import snapshot_build
from conversations.models import LLMCall, Run
from demo.cli import RunWaitTimeout
from memory.models import MemoryChange
from memory.services import memory_delete, memory_held, memory_scope

MEMORY_END_USER = "demo-user-1"
MEMORY_QUESTIONS = ["我在成都", "明天天气如何？", "我搬到重庆了", "明天天气如何？"]
FRESH_START_REASON = "The memory demo starts again."


def memory_demo_fresh_start(*, agent: Agent, end_user: str) -> int:
    """Delete what an earlier showing of the scene left the end user's memory holding (each an
    audited change), so the scene starts from nothing known about them; how many were deleted.
    The demo's conversations have no owner, as the CLI's have none."""
    held = memory_held(
        workspace_id=agent.workspace_id,
        scope=memory_scope(snapshot_build(agent=agent)),
        owner_id=None,
        end_user=end_user,
    )
    for memory in held:
        memory_delete(memory=memory, changed_by=None, source=MemoryChange.Source.OPERATOR, reason=FRESH_START_REASON)
    return len(held)


def extraction_wait(*, run: Run, timeout: float = 60, poll: float = 0.2) -> LLMCall:
    """The run's memory extraction call once it has ended. The worker records its answer and
    the memory changes it made in one commit, so the changes are there when it is."""
    deadline = time.monotonic() + timeout
    while True:
        call = LLMCall.objects.filter(run=run, purpose=LLMCall.Purpose.MEMORY).first()
        if call is not None and call.status != LLMCall.Status.STARTED:
            return call
        if time.monotonic() > deadline:
            raise RunWaitTimeout(f"run {run.pk}: no memory extraction after {timeout:.0f} s; is a worker running?")
        time.sleep(poll)
