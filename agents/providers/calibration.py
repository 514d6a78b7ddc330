"""Token estimates calibrated per model config, from the calls whose server reports usage.

The estimate rule (agents.providers.base) follows OpenAI's tokenisers; a model with a tokeniser
of its own (a Qwen model on Chinese text, say) counts the same text differently, by a roughly
steady factor: a llama.cpp server that reports usage only for unstreamed calls gave 72 prompt
tokens where the rule said 46. So the calls that do report usage teach the factor: what the
server reported and what the rule estimates for the same request and answer are summed on the
model config, prompt and completion apart, and a call that reports none has its estimate scaled
by reported / estimated (still flagged as an estimate). Sums rather than an average of per-call
ratios: a long prompt tells more than a short one, and a total is what budgets and costs add up.

Learning costs no statement of its own: the sums are added by the statement that records the
call anyway (engine.model_call), for a config's first SETTLED_CALLS calls with usage and then
for about one call in SAMPLE_EVERY (by the call row's id), so that the config's row, which every
run on it reads, is not written by every call: concurrent commits would queue on its lock.
"""

import math
from dataclasses import dataclass, fields, replace

from agents.providers.base import Usage

SETTLED_CALLS = 20
SAMPLE_EVERY = 100
# A factor outside these is a server reporting something else (no prompt, a cached count), not
# a tokeniser: an estimate is never scaled further than this.
MIN_RATIO, MAX_RATIO = 0.25, 4.0


def _ratio(reported: int, estimated: int) -> float:
    if not reported or not estimated:
        return 1.0
    return min(max(reported / estimated, MIN_RATIO), MAX_RATIO)


@dataclass(frozen=True)
class Calibration:
    """A model config's learned sums (its columns of the same names)."""

    calibration_calls: int = 0
    prompt_tokens_reported: int = 0
    prompt_tokens_estimated: int = 0
    completion_tokens_reported: int = 0
    completion_tokens_estimated: int = 0

    @classmethod
    def of(cls, config) -> "Calibration":
        """The calibration a model config (or a row read with its columns) holds."""
        return cls(**{field.name: getattr(config, field.name) for field in fields(cls)})

    @property
    def prompt_ratio(self) -> float:
        return _ratio(self.prompt_tokens_reported, self.prompt_tokens_estimated)

    @property
    def completion_ratio(self) -> float:
        return _ratio(self.completion_tokens_reported, self.completion_tokens_estimated)

    def apply(self, usage: Usage) -> Usage:
        """`usage` as the server would likely have reported it, if it is an estimate."""
        if not usage.estimated or not self.calibration_calls:
            return usage
        prompt = math.ceil(usage.prompt_tokens * self.prompt_ratio)
        completion = math.ceil(usage.completion_tokens * self.completion_ratio)
        return replace(usage, prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)

    def learns_from(self, call_id: int) -> bool:
        """Whether a call with reported usage adds to the sums: all until the ratio settles, then
        a sample (call ids are one sequence over every config, so this is about one in SAMPLE_EVERY)."""
        return self.calibration_calls < SETTLED_CALLS or call_id % SAMPLE_EVERY == 0


def calibration_sample(*, reported: Usage, estimated: Usage) -> dict[str, int]:
    """What one call adds to a config's sums: the reported and the estimated counts, each part
    only where both are known (a server reporting no prompt tokens teaches nothing about them)."""
    sample = {"calibration_calls": 1}
    for part in ("prompt", "completion"):
        given, guessed = getattr(reported, f"{part}_tokens"), getattr(estimated, f"{part}_tokens")
        known = given > 0 and guessed > 0
        sample[f"{part}_tokens_reported"] = given if known else 0
        sample[f"{part}_tokens_estimated"] = guessed if known else 0
    return sample
