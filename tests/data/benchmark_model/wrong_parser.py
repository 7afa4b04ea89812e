"""A wrong benchmark_model parser, frozen as a fixture: the first reading anyone writes from the TFLite docs'
example output, kept to show that the fake adb built from real logs catches it.

It takes the first ``count=`` line that starts a line and reports its ``avg`` as the latency: that line is the
warm-up's (benchmark_model prints the warm-up's statistics first), and from TensorFlow 2.13 on every line
carries an ``INFO:`` prefix, so it finds nothing there at all.
"""

import re


def parse_output(text):
    m = re.search(r"^count=(\d+) .*avg=([\d.]+)", text, re.M)
    if m is None:
        raise ValueError("no count= line")
    return {"median_ms": float(m.group(2)) / 1000, "p10_ms": None, "p90_ms": None, "n": int(m.group(1)),
            "statistic": "mean", "xnnpack": None}
