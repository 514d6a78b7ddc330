"""What the engine itself says to an agent's users, in the agent's language.

A run that stops short of an answer (a limit, a tool loop, an expired approval, an empty
answer) ends with an assistant message saying why. Those texts are gettext_lazy strings with
named placeholders; `agent_says` renders one in the language of the agent version the run is
pinned to, whatever language the worker or the request that got there happens to be in.
"""

from django.conf import settings
from django.utils import translation
from django.utils.functional import Promise

from agents.snapshot import AgentSnapshot


def agent_language(snapshot: AgentSnapshot) -> str:
    # Versions pinned before agents had a language speak the site's default.
    return snapshot["agent"].get("language") or settings.LANGUAGE_CODE


def agent_says(snapshot: AgentSnapshot, text: Promise | str, **params) -> str:
    """`text` with `params` filled in, in the agent's language; lazy params (words such as
    "tokens") are translated too."""
    with translation.override(agent_language(snapshot)):
        values = {name: str(value) if isinstance(value, Promise) else value for name, value in params.items()}
        return str(text).format(**values)
