"""The latency table: measured entries with the metadata that says where they were measured, and the
words every latency figure carries about where it came from.

    table.py       LatencyTable and Entry: the versioned JSON schema, metadata, merging writers, the file lock,
                   resolve_table_path (the user's tables, then the shipped ones)
    use.py         which table a command uses or writes, settled before torch or scikit-learn load
    provenance.py  SOURCES (measured, estimated, rehearsal), Prediction, the LatencyModel interface every
                   latency source implements, and the words for measured and predicted figures
"""

from __future__ import annotations

# no lazy exports: nothing here loads a heavy library (standard library and this package's light modules)
from nas.latency.tables.provenance import (
    EAGER,
    GRAPH,
    SOURCES,
    LatencyModel,
    Prediction,
    how_measured,
    how_predicted,
    on_device,
)
from nas.latency.tables.table import Entry, LatencyTable, TableError, Throttle, merge_into, now_iso, resolve_table_path
from nas.latency.tables.use import check_target_table, default_table_out, profile_writer, require_entries

__all__ = ["EAGER", "Entry", "GRAPH", "LatencyModel", "LatencyTable", "Prediction", "SOURCES", "TableError",
           "Throttle", "check_target_table", "default_table_out", "how_measured", "how_predicted", "merge_into",
           "now_iso", "on_device", "profile_writer", "require_entries", "resolve_table_path"]
