"""Latency histograms with geometric buckets, so percentiles can be summed across hours.

Bucket i holds latencies in [BASE**i, BASE**(i+1)) milliseconds. Hourly histograms add up
bucket by bucket; a percentile read back from the sum is exact to within one bucket, i.e.
within 25 % of the true value at BASE = 1.25 (about ±12 % around the bucket's middle).
"""

import math

BASE = 1.25
LOG_BASE = math.log(BASE)


def merge(histograms) -> dict[int, int]:
    total: dict[int, int] = {}
    for histogram in histograms:
        for bucket, count in histogram.items():
            total[int(bucket)] = total.get(int(bucket), 0) + count
    return total


def percentile(histogram: dict[int, int], q: float) -> int | None:
    """The q-quantile (0 < q < 1), interpolated geometrically inside its bucket."""
    n = sum(histogram.values())
    if not n:
        return None
    rank = q * n
    seen = 0
    for bucket in sorted(histogram):
        count = histogram[bucket]
        if seen + count >= rank:
            low = BASE**bucket
            fraction = (rank - seen) / count
            return round(low * BASE**fraction)
        seen += count
    return round(BASE ** (max(histogram) + 1))
