"""Approvals: people deciding on tool calls that a policy holds back (services, selectors, diffs)."""
