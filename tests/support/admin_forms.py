"""Form fields the admin's pages need beside a test's own."""

# The agent admin's inlines (tool links, delegates, guardrail rules, routing rules): a posted form needs each
# one's management form, or Django refuses the whole post.
AGENT_ADMIN_INLINES = ("agent_tools", "delegates", "guardrail_rules", "routing_rules")


def agent_admin_inlines(**totals: int) -> dict:
    """Management-form fields for the agent admin's inlines: `totals` new rows per inline, else none."""
    fields = {}
    for prefix in AGENT_ADMIN_INLINES:
        fields[f"{prefix}-TOTAL_FORMS"] = totals.get(prefix, 0)
        fields[f"{prefix}-INITIAL_FORMS"] = 0
    return fields
