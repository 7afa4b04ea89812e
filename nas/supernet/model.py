"""``Supernet``: one weight-sharing network holding every architecture of a search space.

The supernet keeps the weights of the space's largest architecture (``SearchSpace.largest``:
deepest, widest, largest kernels and expansions, squeeze-excite where it is a choice), built by
``nas.build`` as an ordinary ``ArchNet`` (``Supernet.net``).  Set to an Arch (``set_arch``), its
forward runs the very modules ``nas.build(arch)`` makes (built once per Arch on the ``meta``
device, without memory) with tensors cut from the shared ones (``nas.supernet.elastic.share``:
leading channels, centre kernels, the first slots of each stage).  ``subnet(arch)`` copies those
tensors into a standalone ``nas.build(arch)`` network, which therefore computes exactly what the
supernet set to ``arch`` computes.  ``sort_channels`` re-sorts the channels internal to a block
by importance, so the leading ones a narrow subnet takes are the most important.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import torch
from torch import nn

from nas.arch import Arch, BlockKey
from nas.builder import ArchNet, build, build_layer
from nas.fit.loop import recalibrate_batchnorm
from nas.space import STAGE_KINDS, SearchSpace
from nas.supernet.elastic import locate, share
from nas.supernet.ordering import ChannelDim, internal_dims, sort_dims

__all__ = ["Supernet"]

_CACHE = 64  # subnet skeletons (meta-device modules and their weight maps) kept per supernet


class Supernet(nn.Module):
    """Every architecture of ``space`` in one network, for ``in_chans`` input channels and
    ``num_classes`` classes (default: the space's own)."""

    def __init__(self, space: SearchSpace, *, in_chans: int | None = None, num_classes: int | None = None) -> None:
        super().__init__()
        self.space = space
        self.in_chans = int(in_chans or space.in_chans)
        self.num_classes = int(num_classes or space.num_classes)
        self.largest = self.adapt(space.largest())
        self.smallest = self.adapt(space.smallest())
        self.net = build(self.largest)
        depths = [st.max_depth for st in space.stages]
        self._offsets = [sum(depths[:i]) for i in range(len(depths))]
        self._skeletons: OrderedDict[Arch, tuple[ArchNet, list[tuple[str, str, tuple[int, ...]]]]] = OrderedDict()
        self.arch = self.largest
        self.channel_dims: list[ChannelDim] = internal_dims(self.largest, list(self.net.state_dict()))
        self._check_shareable()

    def _check_shareable(self) -> None:
        """Refuse a space with a block that needs a weight the largest architecture lacks (an attention
        stage whose input projection the largest architecture skips, because its widest input already
        has the embed width): every first block of a stage, from every input width, with the largest
        options, against the supernet's."""
        full = dict(self.net.named_parameters())
        in_widths: tuple[int, ...] = self.space.stem_widths
        for i, (st, h) in enumerate(zip(self.space.stages, self.space.stage_resolutions())):
            opts = {n: max(st.options[n]) for n in STAGE_KINDS[st.kind]}
            for c in in_widths:
                for w in st.width:
                    block = self.space._make_block(st, c, w, st.stride, opts)
                    with torch.device("meta"):
                        layer = build_layer(BlockKey(block, c, h, h))
                    for name, t in layer.named_parameters():
                        src = f"blocks.{self._offsets[i]}.{name}"
                        if src not in full or any(a > b for a, b in zip(t.shape, full[src].shape)):
                            raise ValueError(
                                f"space {self.space.name!r} cannot be one supernet: stage {i} ({st.kind}) from {c} "
                                f"to {w} channels needs weight {name} {tuple(t.shape)}, which its largest "
                                f"architecture lacks; give the stage widths that differ from the previous stage's, "
                                f"or stride 2")
            in_widths = st.width
        self._skeleton(self.smallest)

    # -- architectures ----------------------------------------------------------------------
    def adapt(self, arch: Arch, resolution: int | None = None) -> Arch:
        """``arch`` with the supernet's input channels and classes (at ``resolution`` if given)."""
        a = arch.with_head(num_classes=self.num_classes, in_chans=self.in_chans)
        return a.with_resolution(resolution) if resolution else a

    def sample(self, rng: np.random.Generator | int | None) -> Arch:
        """A uniformly sampled architecture of the space, adapted (``adapt``)."""
        return self.adapt(self.space.random(rng))

    def set_arch(self, arch: Arch) -> Supernet:
        """Make ``forward`` compute ``arch`` (refused when the space cannot produce it)."""
        self._skeleton(arch)
        self.arch = arch
        return self

    def _check_io(self, arch: Arch) -> None:
        if (arch.in_chans, arch.head.num_classes) != (self.in_chans, self.num_classes):
            raise ValueError(f"the Arch takes {arch.in_chans} input channels and {arch.head.num_classes} classes, the "
                             f"supernet {self.in_chans} and {self.num_classes}: adapt it with Supernet.adapt(arch)")

    def _skeleton(self, arch: Arch) -> tuple[ArchNet, list[tuple[str, str, tuple[int, ...]]]]:
        key = arch.with_resolution(self.largest.resolution)  # weights do not depend on the input size
        hit = self._skeletons.get(key)
        if hit is not None:
            self._skeletons.move_to_end(key)
            return hit
        self._check_io(arch)
        _, slots = locate(self.space, arch)
        with torch.device("meta"):
            skel = build(key)
        full = dict(self.net.named_parameters()) | dict(self.net.named_buffers())
        names = []
        for name, t in [*skel.named_parameters(), *skel.named_buffers()]:
            src = name
            if name.startswith("blocks."):
                _, k, rest = name.split(".", 2)
                i, j = slots[int(k)]
                src = f"blocks.{self._offsets[i] + j}.{rest}"
            if src not in full:
                raise ValueError(f"space {self.space.name!r}: the supernet has no weight {src} for {name} of "
                                 f"{arch}; this space's blocks cannot share weights with its largest architecture")
            share(src, full[src], tuple(t.shape))  # checks the shape
            names.append((name, src, tuple(t.shape)))
        self._skeletons[key] = (skel, names)
        if len(self._skeletons) > _CACHE:
            self._skeletons.popitem(last=False)
        return skel, names

    def shared_tensors(self, arch: Arch) -> dict[str, torch.Tensor]:
        """``arch``'s parameters and buffers by its ``ArchNet`` names: views of the shared tensors."""
        _, names = self._skeleton(arch)
        full = dict(self.net.named_parameters()) | dict(self.net.named_buffers())
        return {name: share(src, full[src], shape) for name, src, shape in names}

    def sort_channels(self, optimizer: torch.optim.Optimizer | None = None) -> dict[str, torch.Tensor]:
        """Re-sort every channel dimension internal to a block (``channel_dims``: expanded, squeeze-excite,
        attention-MLP and head hidden channels) by importance, most important first, so that a narrow
        subnet takes the most important ones (``nas.supernet.ordering``).  The largest architecture
        computes the same function afterwards; ``optimizer``'s state of the permuted parameters moves
        with them.  Returns each dimension's permutation (new position -> old channel)."""
        return sort_dims(self.net, self.channel_dims, optimizer)

    # -- forward and extraction -------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.arch == self.largest:
            return self.net(x)
        skel, _ = self._skeleton(self.arch)
        skel.train(self.training)
        return torch.func.functional_call(skel, self.shared_tensors(self.arch), (x,), tie_weights=False, strict=True)

    @torch.no_grad()
    def subnet(self, arch: Arch, data: Any = None, *, batches: int = 16, batch_size: int = 64,
               seed: int = 0) -> ArchNet:
        """A standalone ``nas.build(arch)`` network with the weights ``arch`` inherits (copied), in eval
        mode.  Its BatchNorm statistics are the supernet's (the largest subnet's running averages); with
        ``data`` (a ``nas.data.Dataset``) they are re-estimated on ``batches`` shuffled training batches
        (``nas.fit.loop.recalibrate_batchnorm``, seeded by ``seed``), as scoring needs."""
        tensors = self.shared_tensors(arch)
        device = next(self.net.parameters()).device
        with torch.device("meta"):
            model = build(arch)
        model.load_state_dict({k: v.detach().clone() for k, v in tensors.items()}, strict=True, assign=True)
        model = model.to(device)
        if data is not None:
            recalibrate_batchnorm(model, data, batches=batches, batch_size=min(batch_size, len(data.train)),
                                  generator=torch.Generator().manual_seed(seed), device=device)
        return model.eval()

    def extra_repr(self) -> str:
        return f"space={self.space.name!r}, in_chans={self.in_chans}, num_classes={self.num_classes}"

    def describe(self) -> dict[str, Any]:
        """Space, input and the size of the shared weights."""
        return {"space": self.space.name, "space_digest": self.space.digest(), "in_chans": self.in_chans,
                "num_classes": self.num_classes, "params": sum(p.numel() for p in self.net.parameters())}
