"""Weight-sharing supernet: every architecture of a search space in one network (``Supernet``),
trained once with the sandwich rule and in-place distillation (``train_supernet``), on one or many
processes (``torchrun``); a subnet is extracted with its inherited weights (``Supernet.subnet``)."""

from nas.supernet.elastic import ArchOutsideSpace, locate, share
from nas.supernet.model import Supernet

__all__ = ["ArchOutsideSpace", "Supernet", "locate", "share"]
