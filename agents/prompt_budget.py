"""The work one render of a prompt template may do.

A prompt template (a system prompt, a schedule's or a hook's message) is written by staff and
rendered on a web thread at every save and delivery, and on a worker at every run and fire. A
few lines of nested {% for %} can loop millions of times, and a filter can make a huge string
from a short one (`"a"|ljust:"2000000000"`, a chain of `escapejs`), so each render gets a budget
and stops with PromptBudgetExceeded the moment it is spent:

- steps: every node rendered and every item a {% for %} walks costs one (an empty loop body
  still walks its sequence);
- text: the characters the template's variables and tags produce, counted as they are made;
- time: the rendering thread's processor time (not the wall clock, which a busy machine would
  stretch), for what the two counts do not see (a filter over a large payload value).

Filters are Django's own, wrapped: one whose output is longer than the text budget is refused
after it runs, and those that pad or repeat to a width their argument names are refused before.
{% lorem %} (a repeat count) and {% debug %} (the process's modules) are not available.
"""

import functools
import re
import time

from django.template import Library, Node, TemplateSyntaxError, defaultfilters
from django.template.defaulttags import ForNode
from django.utils.translation import gettext as _

MAX_STEPS = 50_000
MAX_TEXT_CHARS = 1_000_000
MAX_SECONDS = 2.0

# Filters whose argument is a width or a precision: their output grows with it, not the input.
_WIDTH_FILTERS = {"ljust", "rjust", "center", "floatformat", "stringformat"}
_NUMBER = re.compile(r"[0-9]+")
_UNAVAILABLE_TAGS = ("lorem", "debug")


class PromptBudgetExceeded(ValueError):
    """The render was stopped: it passed one of the limits; the message names which."""


def _too_much_text() -> PromptBudgetExceeded:
    return PromptBudgetExceeded(
        _("The template makes more than %(limit)s characters of text in one render.") % {"limit": MAX_TEXT_CHARS}
    )


class RenderBudget:
    """What is left of one render's budget; the Context carries it as `prompt_budget`."""

    def __init__(self):
        self.steps = 0
        self.chars = 0
        self.deadline = time.thread_time() + MAX_SECONDS

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps > MAX_STEPS:
            raise PromptBudgetExceeded(
                _(
                    "The template does more than %(limit)s steps of work in one render (each tag or variable "
                    "rendered and each loop item counts one); loop over fewer items."
                )
                % {"limit": MAX_STEPS}
            )
        if time.thread_time() > self.deadline:
            raise PromptBudgetExceeded(
                _("The template takes more than %(seconds)s seconds of processor time to render.")
                % {"seconds": MAX_SECONDS}
            )

    def text(self, chars: int) -> None:
        self.chars += chars
        if self.chars > MAX_TEXT_CHARS:
            raise _too_much_text()


class _MeteredSequence:
    """A {% for %} tag's sequence: its items are paid for before the loop walks them."""

    def __init__(self, expression):
        self.expression = expression

    def resolve(self, context, ignore_failures=False):
        values = self.expression.resolve(context, ignore_failures=ignore_failures)
        if values is None:
            return values
        if not hasattr(values, "__len__"):
            values = list(values)
        context.prompt_budget.step(len(values))
        return values

    def __str__(self):
        return str(self.expression)


def _metered_render(render, *, leaf: bool):
    @functools.wraps(render)
    def metered(context):
        budget = context.prompt_budget
        budget.step()
        output = render(context)
        if leaf:  # a container's text is its children's, already counted
            budget.text(len(output))
        return output

    return metered


def template_meter(template) -> None:
    """Charge every render of the compiled `template`'s nodes to the Context's budget."""
    for node in template.nodelist.get_nodes_by_type(Node):
        if isinstance(node, ForNode):
            node.sequence = _MeteredSequence(node.sequence)
        leaf = not any(getattr(node, name, None) for name in node.child_nodelists)
        node.render = _metered_render(node.render, leaf=leaf)


def _checked_filter(name: str, func):
    @functools.wraps(func)
    def checked(value, *args, **kwargs):
        if args and name in _WIDTH_FILTERS:
            if any(int(number) > MAX_TEXT_CHARS for number in _NUMBER.findall(str(args[0]))):
                raise _too_much_text()
        if args and name == "join" and hasattr(value, "__len__"):
            if len(value) * len(str(args[0])) > MAX_TEXT_CHARS:
                raise _too_much_text()
        output = func(value, *args, **kwargs)
        if hasattr(output, "__len__") and len(output) > MAX_TEXT_CHARS:
            raise _too_much_text()
        return output

    return checked


def _unavailable(parser, token):
    raise TemplateSyntaxError(
        _("The %(tag)s tag is not available in prompt templates.") % {"tag": token.split_contents()[0]}
    )


# Registered after Django's built-ins (agents.prompting's engine), so these take their places.
register = Library()
for _name, _func in defaultfilters.register.filters.items():
    register.filter(_name, _checked_filter(_name, _func))
for _name in _UNAVAILABLE_TAGS:
    register.tag(_name, _unavailable)
