"""The latency table: measured entries with the metadata that says where they were measured, and the
words every latency figure carries about where it came from.

    table.py       LatencyTable and Entry: the versioned JSON schema, metadata, merging writers, the file lock,
                   resolve_table_path (the user's tables, then the shipped ones)
    use.py         which table a command uses or writes, settled before torch or scikit-learn load
    provenance.py  SOURCES (measured, estimated, rehearsal), Prediction, the LatencyModel interface every
                   latency source implements, and the words for measured and predicted figures
"""

from __future__ import annotations

from nas._lazy import lazy_exports

_HOMES = {
    "EAGER": "provenance",
    "GRAPH": "provenance",
    "SOURCES": "provenance",
    "LatencyModel": "provenance",
    "Prediction": "provenance",
    "how_measured": "provenance",
    "how_predicted": "provenance",
    "on_device": "provenance",
    "Entry": "table",
    "LatencyTable": "table",
    "TableError": "table",
    "Throttle": "table",
    "merge_into": "table",
    "now_iso": "table",
    "resolve_table_path": "table",
    "check_target_table": "use",
    "default_table_out": "use",
    "profile_writer": "use",
    "require_entries": "use",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
