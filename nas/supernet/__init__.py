"""Weight-sharing supernet: every architecture of a search space in one network (``Supernet``),
trained once with the sandwich rule or progressive shrinking and in-place distillation
(``nas.supernet.train``, ``nas.supernet.schedule``), on one process or many (``torchrun``); a subnet
is extracted with its inherited weights (``Supernet.subnet``)."""

from __future__ import annotations

from nas._lazy import lazy_exports

__all__ = ["ArchOutsideSpace", "Supernet", "load_supernet", "locate", "share", "train_supernet"]

_HOMES = {"ArchOutsideSpace": "elastic", "locate": "elastic", "share": "elastic", "Supernet": "model",
          "load_supernet": "checkpoint", "train_supernet": "train",
          "Dist": "dist", "process_group": "dist"}


# timm loads with the first use, not with nas.supernet.dist in every process
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
