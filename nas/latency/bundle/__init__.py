"""Device bundles: a calibrated latency table for a device without torch (a Jetson, a phone, a board).

    roundtrip.py       write_bundle (the graphs, a manifest, the scripts) and import_bundle (the device's
                       results.json into a table, refused for a real mismatch, with the fix in the message)
    files.py           a bundle's files: the graph format per runtime, its size and measuring time estimated
                       before writing (bundle_cost), its README.md
    measure_bundle.py  the script that measures a bundle on the device, or rehearses it on any machine
    hwnas_stats.py     the script's timing loop and statistics

``measure_bundle.py`` and ``hwnas_stats.py`` are standalone (standard library and numpy only) and are
copied into every bundle under these names, with the runtimes' timers (``nas.latency.runtimes``:
``hwnas_trt.py``, ``hwnas_cuda.py``, ``hwnas_litert.py``) and the machine's identity
(``nas.machine``: ``hwnas_device.py``): ``SCRIPTS``.
"""

from __future__ import annotations

from nas._lazy import lazy_exports

_HOMES = {
    "SCRIPTS": "roundtrip",
    "BundleError": "roundtrip",
    "bundle_manifest": "roundtrip",
    "bundle_networks": "roundtrip",
    "bundle_results": "roundtrip",
    "import_bundle": "roundtrip",
    "write_bundle": "roundtrip",
    "bundle_cost": "files",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
