"""What a guardrail scan costs: 1 MB of text against 100 blocked terms and 10 patterns.

    python -m bench.guardrails [--repeat 5] [--size 1000000]

The rules are those of agents.guardrails (terms as one RE2 alternation, patterns on RE2, the
personal-data detectors), scanned in-process with no database; the figure is the CPU time of
the smallest of `--repeat` scans (process time: what a worker spends, whatever else shares the
machine), in milliseconds, and MB/s of UTF-8. Texts: one nothing matches, one a few matches
are spread over (a term every ~10 KB), one where a term stands every few characters, and the
shape of the reported attack (576 KB repeating a term 16,000 times: 25 s of worker CPU before).
A last line adds the four personal-data rules to the clean text. Nothing is asserted: the
numbers are for docs/guardrails.md.
"""

import argparse
import random
import time

from agents import guardrails

PATTERNS = [
    r"(?i)secret-\d{4}",
    r"(?i)project\s+[a-z]{2,8}\s+launch",
    r"\b[A-Z]{2}-\d{6}\b",
    r"(x|xx)+y",  # catastrophic on a backtracking engine, linear on RE2
    r"(?i)(password|passwd|口令)\s*[:：=]\s*\S+",
    r"内部(资料|文件|通知)",
    r"\d{4}-\d{2}-\d{2}\s+机密",
    r"(?i)api[_-]?key\s*=\s*[A-Za-z0-9]{16,}",
    r"[\p{Han}]{2}绝密",
    r"(?i)confidential\s*//\s*\w+",
]
FILLER = "今天天气晴朗，我们讨论了季度计划和客户反馈。The meeting covered roadmap items and open questions. "


def _terms(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    han = "机密项目文件计划测试数据客户合同报价"
    terms = ["".join(rng.choice(letters) for _ in range(rng.randint(5, 12))) for _ in range(60)]
    terms += ["".join(rng.choice(han) for _ in range(rng.randint(2, 5))) for _ in range(40)]
    return terms


def _rules(terms: list[str], *, pii: bool = False) -> list[dict]:
    rules = [{"id": 1, "side": "input", "kind": guardrails.KIND_TERMS, "action": "redact", "terms": terms}]
    rules += [
        {"id": 10 + n, "side": "input", "kind": guardrails.KIND_PATTERN, "action": "flag", "pattern": pattern}
        for n, pattern in enumerate(PATTERNS)
    ]
    if pii:
        rules += [
            {"id": 30 + n, "side": "input", "kind": kind, "action": "redact"}
            for n, kind in enumerate(guardrails.PII_KINDS)
        ]
    return rules


def _text(size: int, term: str | None, every: int) -> str:
    filler = (FILLER * (size // len(FILLER) + 1))[:size]
    if term is None:
        return filler
    parts, at = [], 0
    while at < size:
        parts += [filler[at : at + every], term]
        at += every
    return "".join(parts)[:size]


def _best(rules: list[dict], text: str, repeat: int) -> tuple[float, int]:
    best, matches = float("inf"), 0
    for _ in range(repeat):
        started = time.process_time()
        hits = guardrails.scan(rules, text)
        best = min(best, time.process_time() - started)
        matches = sum(hit.count for hit in hits)
    return best, matches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--size", type=int, default=1_000_000, help="characters of text")
    args = parser.parse_args()
    rng = random.Random(39)
    terms = _terms(rng)
    rules = _rules(terms)
    for pattern in PATTERNS:
        guardrails.pattern_check(pattern)
    guardrails.scan(rules, "warm-up")  # compiles the rules once, as a worker's first scan would
    cases = [
        ("no match", rules, _text(args.size, None, 0)),
        ("a term every ~10 KB", rules, _text(args.size, terms[0], 10_000)),
        ("a term every few characters", rules, _text(args.size, terms[60], 1)),
        # The reported attack: a 576 KB request repeating a blocked term 16,000 times.
        ("576 KB, a term 16,000 times", rules, _text(576_000, terms[60], 33)),
        ("no match, with the 4 personal-data rules", _rules(terms, pii=True), _text(args.size, None, 0)),
    ]
    print(f"guardrail scan: {args.size / 1e6:.1f} M characters, 100 terms, 10 patterns, best of {args.repeat}")
    for name, case_rules, text in cases:
        seconds, matches = _best(case_rules, text, args.repeat)
        megabytes = len(text.encode()) / 1e6
        print(
            f"  {name:42} {seconds * 1000:8.1f} ms CPU  {megabytes / seconds:7.1f} MB/s  "
            f"{matches:>7} matches  ({megabytes:.1f} MB UTF-8)"
        )


if __name__ == "__main__":
    main()
