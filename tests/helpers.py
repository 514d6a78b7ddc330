import time


def wait_for(predicate, *, timeout: float = 30, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


# The agent admin's inlines (tool links, delegates, guardrail rules): a posted form needs each
# one's management form, or Django refuses the whole post.
AGENT_ADMIN_INLINES = ("agent_tools", "delegates", "guardrail_rules")


def agent_admin_inlines(**totals: int) -> dict:
    """Management-form fields for the agent admin's inlines: `totals` new rows per inline, else none."""
    fields = {}
    for prefix in AGENT_ADMIN_INLINES:
        fields[f"{prefix}-TOTAL_FORMS"] = totals.get(prefix, 0)
        fields[f"{prefix}-INITIAL_FORMS"] = 0
    return fields
