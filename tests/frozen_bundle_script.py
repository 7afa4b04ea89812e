"""FROZEN copy, for tests only: ``merge`` of nas/latency/bundle_script.py as it was when an entry's
p10 / p90 were the means of its rounds' p10 / p90 while its median was the median of its rounds'
medians (p10 could come out above the median).  Do not edit: tests show it failing."""

import datetime
import statistics


def now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def merge(old, st, rounds_done):
    """An entry plus one more round (the round medians kept; their median is the figure)."""
    if old is None:
        return {**st, "rounds_ms": [st["median_ms"]], "remeasured": rounds_done, "measured_at": now()}
    k = len(old["rounds_ms"])
    r = old["rounds_ms"] + [st["median_ms"]]

    def mean(f):  # None: trtexec printed no such percentile (its summary, without --exportTimes)
        return None if old[f] is None or st[f] is None else (old[f] * k + st[f]) / (k + 1)

    return {"median_ms": float(statistics.median(r)), "p10_ms": mean("p10_ms"), "p90_ms": mean("p90_ms"),
            "n": old["n"] + st["n"], "rounds_ms": r, "remeasured": old.get("remeasured", 0) + rounds_done,
            "measured_at": now()}
