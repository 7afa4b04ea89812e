"""Profiling: ``nas.profile`` measures a target's table on its device, ``nas.validate`` proves the predictor
built on it against held-out networks measured there.

    workflow.py         profile_target: the whole nas.profile workflow (measure, refresh, recalibrate, or
                        write / import a device bundle)
    profiler.py         what a table holds: the blocks, the calibration and pruned networks, their order
    jobs.py             every measurement as one planned list of jobs (expected seconds, a time budget), run
                        under one progress bar
    claims.py           per-measurement claims, so runs sharing one table never time the same item at once
    watch.py            whether the machine misled a profile (contention, anchors re-timed through the run)
    reproducibility.py  does a table reproduce itself: entries re-timed at the end of a profile
    refresh.py          refresh on the fly: a few calibration networks re-timed now, the predictions rescaled
    validate.py         validate_target: the predictor and the trivial methods scored on held-out networks
    validate_plot.py    the validation report's scatter plot
    repeatability.py    does a held-out network's measurement repeat from one fresh session to the next
    budget_curve.py     what a budgeted table covers, and what more minutes of measuring would buy
    options.py          the defaults profile_target / validate_target share with their commands' schemas
                        (standard library only)
"""

from __future__ import annotations

from nas._lazy import lazy_exports

_HOMES = {
    "PROFILE": "options",
    "REFRESH": "options",
    "VALIDATE": "options",
    "profile_target": "workflow",
    "Refresh": "refresh",
    "refresh_model": "refresh",
    "RESCALED": "validate",
    "validate_target": "validate",
    "reproducibility_lines": "reproducibility",
    "summary_line": "reproducibility",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
