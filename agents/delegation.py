"""Agents as tools: the shape of a delegation chain, checked when a delegate is saved.

An agent may list other agents as tools (agents.models.AgentDelegate). The delegation graph
must stay acyclic (an agent that reaches itself through its delegates would start runs without
end) and its longest chain must fit the depth limit. These are pure functions of the graph; the
engine checks the same two things again when a run starts a child (engine.delegation), because
a version pinned before an edit may still hold a delegate the graph no longer allows.
"""

from collections.abc import Mapping, Set

from django.utils.translation import gettext as _

# The tool input every delegate takes: a task in words, and optional structured fields.
DELEGATE_PARAMETERS = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What the agent should do, in plain words.", "minLength": 1},
        "fields": {
            "type": "object",
            "description": "Optional structured values the task needs (ids, amounts, dates).",
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}


def _longest(edges: Mapping[int, Set[int]], start: int) -> int:
    """Edges on the longest path leaving `start` (the graph is acyclic: _reaches is checked first)."""
    memo: dict[int, int] = {}

    def walk(node: int) -> int:
        if node not in memo:
            memo[node] = max((walk(nxt) + 1 for nxt in edges.get(node, ())), default=0)
        return memo[node]

    return walk(start)


def _reaches(edges: Mapping[int, Set[int]], start: int, goal: int) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return False


def chain_problem(*, edges: Mapping[int, Set[int]], parent: int, child: int, max_depth: int) -> str | None:
    """Why the edge parent → child cannot be added to `edges` (parent → the agents it delegates
    to, without this edge), or None if it can."""
    if _reaches(edges, child, parent):
        return _("This would make a cycle: the delegated agent reaches this agent through its own delegates.")
    reverse: dict[int, set[int]] = {}
    for source, targets in edges.items():
        for target in targets:
            reverse.setdefault(target, set()).add(source)
    depth = _longest(reverse, parent) + 1 + _longest(edges, child)
    if depth > max_depth:
        return _(
            "This would make a chain of %(depth)s delegations; at most %(limit)s are allowed "
            "(AGENTRY_DELEGATION_MAX_DEPTH)."
        ) % {"depth": depth, "limit": max_depth}
    return None


def access_problem(*, parent_groups: Set[int], child_groups: Set[int]) -> str | None:
    """Why delegating from an agent shared with `parent_groups` to one shared with `child_groups`
    would widen access (empty: every user may use the agent), or None. A delegated run's
    conversation belongs to the parent's user, who reads it: every user of the parent must be
    allowed the child already. The engine checks the user itself at run time (engine.delegation)."""
    if not child_groups or (parent_groups and parent_groups <= child_groups):
        return None
    return _(
        "The delegated agent is restricted to groups that not every user of this agent is in, and its "
        "delegated runs would belong to those users. Share it with every group of this agent first."
    )
