"""Line differences between the arguments a model asked for and the ones a person approved."""

import difflib
import json


def arguments_diff(original, edited) -> list[tuple[str, str]]:
    """[(kind, line)] over pretty-printed JSON; kind is "same", "removed" or "added"."""
    before = json.dumps(original, indent=2, ensure_ascii=False, sort_keys=True).splitlines()
    after = json.dumps(edited, indent=2, ensure_ascii=False, sort_keys=True).splitlines()
    kinds = {" ": "same", "-": "removed", "+": "added"}
    return [(kinds[line[0]], line[2:]) for line in difflib.ndiff(before, after) if line[0] in kinds]
