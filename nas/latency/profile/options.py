"""The defaults that ``profile_target`` / ``validate_target`` share with their commands' schemas.

One source for each: the library functions take their defaults from here, and ``nas.config`` builds the
``nas.profile`` / ``nas.validate`` schemas from the same objects.  Standard library only, so composing a
command's config loads no torch, scikit-learn or matplotlib.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PROFILE", "REFRESH", "VALIDATE", "VALIDATION_SEED", "ProfileDefaults", "RefreshDefaults", "ValidateDefaults"]

VALIDATION_SEED = 7_000_001  # held-out networks: apart from every calibration network's seed


@dataclass(frozen=True)
class ProfileDefaults:
    """``profile_target``'s defaults.

    Args:
        calibration_networks: whole networks per space measured for the predictor's calibration.
        pruned_networks: + networks per space narrowed as ``nas.train``'s pruning narrows them.
        refresh: calibration networks per space re-measured to rescale a table that has drifted.
        held_out: with a bundle, seeded networks measured for validation only.
        bundle_max_gb: a bundle estimated above this many GB is written only when asked to (``yes``) or
            confirmed at the prompt.
    """

    calibration_networks: int = 40
    pruned_networks: int = 20
    refresh: int = 0
    held_out: int = 0
    bundle_max_gb: float = 2.0


@dataclass(frozen=True)
class ValidateDefaults:
    """``validate_target``'s defaults.

    Args:
        n: seeded held-out networks, split evenly over the spaces.
        pruned: + held-out networks narrowed as ``nas.train``'s pruning narrows them.
        out: the report's path (a ``.png`` plot and a measurement cache beside it).
        seed: the seed of the held-out draw.
        drift_anchors: calibration networks per space re-measured beside the held-out set.
    """

    n: int = 200
    pruned: int = 0
    out: str = "validation/report.json"
    seed: int = VALIDATION_SEED
    drift_anchors: int = 10


@dataclass(frozen=True)
class RefreshDefaults:
    """The refresh on the fly's defaults (``nas.latency.profile.refresh``: ``nas.search``, ``nas.predict``,
    ``nas.validate``).

    Args:
        retime: on the machine a table was measured on, re-time a few of its calibration networks first
            and rescale the predictions by how fast they run now.
        budget_s: the re-timing's expected seconds at most; where its anchors would take longer, nothing
            is re-timed.
    """

    retime: bool = True
    budget_s: float = 4.0


PROFILE = ProfileDefaults()
REFRESH = RefreshDefaults()
VALIDATE = ValidateDefaults()
