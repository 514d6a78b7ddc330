"""General-purpose built-in tools: the time, arithmetic and reading a web page."""

import ast
import math
import operator
import zoneinfo
from datetime import datetime

import httpx
from simpleeval import InvalidExpression, OperatorNotDefined, SimpleEval

from platform_site import outbound
from tools.html_text import html_to_text
from tools.registry import ToolError, python_tool


@python_tool(
    name="current_time",
    description="The current date and time in a time zone (IANA name such as Asia/Shanghai or Europe/London).",
    parameters={
        "type": "object",
        "properties": {"time_zone": {"type": "string", "description": "IANA time zone; default UTC."}},
    },
    idempotent=True,
    timeout_seconds=5,
    max_result_chars=500,
)
def current_time(*, ctx, time_zone: str = "UTC") -> dict:
    try:
        zone = zoneinfo.ZoneInfo(time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"Unknown time zone {time_zone!r}; use an IANA name such as Asia/Shanghai or Europe/London.")
    now = datetime.now(zone)
    return {
        "time_zone": time_zone,
        "datetime": now.isoformat(timespec="seconds"),
        "weekday": now.strftime("%A"),
        "utc_offset": now.strftime("%z")[:3] + ":" + now.strftime("%z")[3:],
    }


# Bounds that keep one expression cheap: Python's integers grow without limit, so 9**9**9
# or a chain of huge products would otherwise tie up a worker (and its memory) for minutes.
# Every operation and function that can make a number grow is bounded here; the calculator
# also runs sandboxed (a child process killed at its timeout), for anything these bounds miss.
# Shifts, strings, factorials and int() are not offered at all.
MAX_EXPRESSION_CHARS = 500
MAX_RESULT_DIGITS = 1000
_MAX_BITS = int(MAX_RESULT_DIGITS * math.log2(10))


def _bounded_power(base, exponent):
    if isinstance(base, (int, float)) and isinstance(exponent, (int, float)):
        magnitude = abs(exponent) * math.log10(abs(base)) if base not in (0, 1, -1) else 0
        if abs(exponent) > 10_000 or magnitude > MAX_RESULT_DIGITS:
            raise ToolError(f"{base} ** {exponent} is too large to compute (over {MAX_RESULT_DIGITS} digits).")
    return operator.pow(base, exponent)


def _bounded_product(a, b):
    if isinstance(a, int) and isinstance(b, int) and a.bit_length() + b.bit_length() > _MAX_BITS:
        raise ToolError(f"The product is too large to compute (over {MAX_RESULT_DIGITS} digits).")
    return operator.mul(a, b)


def _bounded_round(number, ndigits=None):
    # round(1, -10**7) computes 10**(10**7) on the way: as costly as the power it hides.
    if ndigits is not None and (type(ndigits) is not int or abs(ndigits) > MAX_RESULT_DIGITS):
        raise ToolError(f"round() takes a whole number of digits between -{MAX_RESULT_DIGITS} and {MAX_RESULT_DIGITS}.")
    return round(number, ndigits)


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _bounded_product,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _bounded_power,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_FUNCTIONS = {
    "abs": abs,
    "round": _bounded_round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
}
_NAMES = {"pi": math.pi, "e": math.e}
# Arithmetic only: attribute access, subscripts, strings, comprehensions and the like are
# not evaluated at all, so nothing reaches an object's methods or internals.
_NODES = (ast.Expr, ast.Constant, ast.Name, ast.UnaryOp, ast.BinOp, ast.Call)


def _evaluator() -> SimpleEval:
    evaluator = SimpleEval(operators=_OPERATORS, functions=_FUNCTIONS, names=_NAMES)
    evaluator.nodes = {node: handler for node, handler in evaluator.nodes.items() if node in _NODES}
    evaluate_constant = evaluator.nodes[ast.Constant]

    def numbers_only(node):
        if type(node.value) not in (int, float):
            raise ToolError(f"Only numbers are allowed, not {node.value!r}.")
        return evaluate_constant(node)

    def no_attributes(node):
        raise ToolError(
            f"Attribute access (.{node.attr}) is not allowed; use numbers, operators and the listed functions."
        )

    evaluator.nodes[ast.Constant] = numbers_only
    evaluator.nodes[ast.Attribute] = no_attributes
    return evaluator


@python_tool(
    name="calculator",
    description=(
        "Evaluates an arithmetic expression exactly: + - * / // % ** and parentheses, "
        "functions abs round min max sqrt floor ceil log log10 exp sin cos tan, constants pi e."
    ),
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "e.g. (1250 * 1.08) / 12"}},
        "required": ["expression"],
    },
    idempotent=True,
    timeout_seconds=5,
    max_result_chars=2000,
    sandboxed=True,
)
def calculator(*, ctx, expression: str) -> dict:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"The expression is longer than {MAX_EXPRESSION_CHARS} characters; split the calculation.")
    try:
        value = _evaluator().eval(expression)
    except ToolError:
        raise
    except OperatorNotDefined:
        raise ToolError(
            f"{expression!r} uses an operator this calculator does not offer; use + - * / // % ** and parentheses."
        )
    except InvalidExpression as exc:
        raise ToolError(f"Cannot evaluate {expression!r}: {exc}. Use numbers, operators and the listed functions.")
    except SyntaxError:
        raise ToolError(f"{expression!r} is not a valid arithmetic expression.")
    except RecursionError:
        raise ToolError(f"{expression!r} is nested too deeply; split the calculation.")
    except ZeroDivisionError:
        raise ToolError("Division by zero.")
    except (OverflowError, ValueError, TypeError) as exc:
        raise ToolError(f"Cannot evaluate {expression!r}: {exc}.")
    if type(value) not in (int, float):
        raise ToolError(f"{expression!r} does not evaluate to a number.")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError(f"{expression!r} overflows: the result is too large for a floating-point number.")
    if isinstance(value, int) and value.bit_length() > _MAX_BITS:
        raise ToolError(f"The result has more than {MAX_RESULT_DIGITS} digits.")
    return {"expression": expression, "result": value}


_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")


@python_tool(
    name="fetch_url",
    description="Reads a public web page or text document (GET only) and returns its text, without markup.",
    parameters={
        "type": "object",
        "properties": {"url": {"type": "string", "description": "An absolute http(s) URL."}},
        "required": ["url"],
    },
    idempotent=True,
    timeout_seconds=20,
    max_result_chars=6000,
)
def fetch_url(*, ctx, url: str) -> str:
    try:
        fetched = outbound.guarded_request(
            "GET",
            url,
            headers={"Accept": "text/html,text/plain,application/json;q=0.9,*/*;q=0.5"},
            timeout_seconds=15,
            max_bytes=2_000_000,
        )
    except outbound.OutboundBlocked as exc:
        raise ToolError(exc.message, detail=exc.detail)
    except httpx.HTTPError as exc:
        raise ToolError(f"Could not fetch {url}: {exc or type(exc).__name__}.")
    response = fetched.response
    if response.status_code >= 400:
        raise ToolError(f"{response.url} answered HTTP {response.status_code} {response.reason_phrase}.")
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type and not (content_type.startswith(_TEXT_TYPES) or content_type.endswith(("+json", "+xml"))):
        raise ToolError(f"{response.url} is {content_type}, not text; this tool reads text only.")
    text = fetched.text()
    title = ""
    if content_type in ("text/html", "application/xhtml+xml") or (not content_type and "<html" in text[:500].lower()):
        title, text = html_to_text(text)
    header = f"URL: {response.url}\n" + (f"Title: {title}\n" if title else "")
    cut = "\n… [the page was longer than 2 MB and was cut]" if fetched.truncated else ""
    return f"{header}\n{text}{cut}"
