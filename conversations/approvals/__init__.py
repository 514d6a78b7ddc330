"""Reads on approvals (who may see which, the queue's filters); deciding them is engine.approvals."""
