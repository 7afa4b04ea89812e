"""The timing statistics of a hwnas device bundle's script: standalone, numpy and the standard library.

Copied into a bundle as ``hwnas_stats.py`` beside ``measure_bundle.py``: the timing loop of the
runtimes timed on the host (``timed``: warm-up, then at least ``repeats`` calls and ``min_time_s``),
an entry's rounds merged (``merge``: every statistic the median over the rounds of that round's own,
so p10 <= median <= p90), the spread that triggers a re-measure (``spread``) and the note on rounds
far apart (``noise_note``).  Python 3.6 and later.
"""

import datetime
import statistics
import time

import numpy as np

__all__ = ["ROUNDS_APART", "merge", "noise_note", "now", "spread", "stats", "timed"]


def now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()



def stats(ms):
    a = np.asarray(ms, dtype=float)
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90)), "n": int(a.size)}


def timed(call, s):
    """The timing loop: warm-up, then at least `repeats` calls and at least `min_time_s` seconds."""
    for _ in range(s["warmup"]):
        call()
    times, t_end = [], time.perf_counter() + s["min_time_s"]
    while len(times) < s["repeats"] or (time.perf_counter() < t_end and len(times) < 2000):
        t0 = time.perf_counter()  # not perf_counter_ns: Python 3.6
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return stats(times)


def merge(old, st, rounds_done):
    """An entry plus one more round.  Every statistic is the median over the rounds of that round's own
    statistic (``rounds_ms``, ``rounds_p10_ms``, ``rounds_p90_ms``), so p10 <= median <= p90 always
    holds (each round's p10 <= its median <= its p90, and the medians of the rounds keep that order)."""
    if old is None:
        return {**st, "rounds_ms": [st["median_ms"]], "rounds_p10_ms": [st["p10_ms"]], "rounds_p90_ms": [st["p90_ms"]],
                "remeasured": rounds_done, "measured_at": now()}
    k = len(old["rounds_ms"])
    r = old["rounds_ms"] + [st["median_ms"]]
    # a results.json written before the rounds' percentiles were kept holds only their mean: k copies of it
    p10s = old.get("rounds_p10_ms") or [old["p10_ms"]] * k
    p90s = old.get("rounds_p90_ms") or [old["p90_ms"]] * k
    p10s, p90s = p10s + [st["p10_ms"]], p90s + [st["p90_ms"]]

    def med(values):  # None: trtexec printed no such percentile in some round (its summary, without --exportTimes)
        return None if any(v is None for v in values) else float(statistics.median(values))

    return {"median_ms": float(statistics.median(r)), "p10_ms": med(p10s), "p90_ms": med(p90s),
            "n": old["n"] + st["n"], "rounds_ms": r, "rounds_p10_ms": p10s, "rounds_p90_ms": p90s,
            "remeasured": old.get("remeasured", 0) + rounds_done, "measured_at": now()}


#: rounds of one graph further apart than this (slowest / fastest round median) are noted
ROUNDS_APART = 2.0


def noise_note(entries):
    """What the rounds say about the machine: the entries whose rounds' medians are more than
    ``ROUNDS_APART`` times apart (the device's speed changed between rounds: other work, clocks,
    thermal limits), as a record for results.json and a line to print; None when there are none."""
    apart = sorted(((max(e["rounds_ms"]) / min(e["rounds_ms"]), f) for f, e in entries.items()
                    if len(e.get("rounds_ms") or ()) > 1 and min(e["rounds_ms"]) > 0
                    and max(e["rounds_ms"]) / min(e["rounds_ms"]) > ROUNDS_APART), reverse=True)
    if not apart:
        return None
    several = [f for f, e in entries.items() if len(e.get("rounds_ms") or ()) > 1]
    line = (f"noise: in {len(apart)} of {len(several)} graphs measured in several rounds the rounds were more than "
            f"{ROUNDS_APART:g}x apart (worst {apart[0][0]:.1f}x, {apart[0][1]}): the device's speed changed between "
            "rounds (other work on it, clocks, thermal limits). Each figure is the median of its rounds; for steadier "
            "ones stop other work, fix the clocks (Jetson: sudo nvpmodel -m 0 && sudo jetson_clocks) and measure "
            "again into a fresh results.json")
    return {"rounds_apart": len(apart), "of": len(several), "factor": ROUNDS_APART,
            "worst": [{"file": f, "slowest_over_fastest": round(x, 2)} for x, f in apart[:5]], "note": line}


def spread(st):
    """(p90 - p10) / median; 0 where a percentile is unknown (nothing to re-measure for)."""
    if st["p10_ms"] is None or st["p90_ms"] is None or st["median_ms"] <= 0:
        return 0.0
    return (st["p90_ms"] - st["p10_ms"]) / st["median_ms"]
