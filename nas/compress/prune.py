"""Latency-aware structured pruning in spec space: an ``Arch`` in, a smaller ``Arch`` out.

Because every channel count of an ``Arch`` is explicit, pruning is done on the spec, not on a
traced graph: the prunable channel sets ("units") follow from the block kinds, a plan changes
their sizes, and the weights of the kept channels are copied into ``build(plan.arch)``.  The
result is exact (a removed channel whose weights are zero leaves the output unchanged; see
``tests/test_prune.py``) and is again an ``Arch`` that the latency predictor scores.

Units (``channel_units``)
    ``mid``    the expansion channels of an inverted residual (``ir``) or fused-MBConv block:
               free to shrink, nothing outside the block sees them.
    ``chain``  a block output together with every residual block that adds into it: a
               producer (the stem, or a block without a residual) and the following blocks
               whose residual keeps the same channels share one channel set, so it shrinks
               jointly (writers: each member's last conv; readers: each member's and the next
               layer's input).  A chain containing an attention block is left alone (its embed
               dim is tied to the head count).
    ``hidden`` the hidden layer of a ``conv_pool`` / ``pool_conv`` head.
    Squeeze-excite channels are not searched: they follow their block's channels by the
    space's rule ``make_divisible(channels * se_ratio, multiple)`` (or, without a space,
    proportionally), keeping the SE channels of largest L1 norm.

Sizes move in groups of the space's ``channel_multiple`` (8 or 16): a unit shrinks to the
next lower multiple, so the result stays aligned to hardware tiles.  A step that would change
which blocks have a residual (a producer whose input and output widths become equal) is not
taken.

Importance (per channel, ``channel_importance``), normalised per tensor by its mean and summed
over every tensor of the unit (writers and readers, as torch-pruning's group importance):
``l1`` the L1 norm of the conv/linear weight slices, ``bn`` the BatchNorm scale |gamma|,
``taylor`` first-order Taylor (Molchanov et al. 2019): per batch, (sum of weight x gradient
over the channel's parameters) squared, averaged over the batches.

``loss`` (``LossProbe``, sensitivity analysis as in Distiller or AMC's layer probing): channels go
in L1 order, but what a step costs is measured: the increase of the cross-entropy on a fixed set
of training images when the step is applied to the network as pruned so far, before any
fine-tuning.  A removed channel is masked exactly (every tensor of its unit zeroed at that index,
which is what slicing it out does), so the probe sees the network ``apply_plan`` will build.
Because a measured loss compares any two changes, this criterion also offers whole-structure
steps (``structural=True``), which pay off where fixed per-operator costs dominate (a 50 us
network on a CPU: an SE module is five small operators, ~8% of it here):

``se:<block>``    drop a block's squeeze-excite; its gate becomes its mean over the probe images,
                  a per-channel constant folded into the next 1x1 convolution's weights.
``block:<block>`` drop a residual block (its branch becomes zero, the block an identity); the
                  stage gets one block shallower.

Planning (``plan_pruning``): greedily, among the units that can still shrink by one group,
take the step with the largest predicted latency saving per unit of importance removed (the
candidates are scored by the target's latency model, which fills block shapes its table lacks
with its learned model), until the prediction reaches ``target_ms``.  A step may remove up to
``lookahead`` groups from one unit: where the kernels work in tiles wider than the group
(AVX-512 pads channels to 16, a GPU to 32 or 64), one group less is often no faster and the
greedy would stop early (it stopped at 0.77x on small Fashion-MNIST networks before).

Why not torch-pruning: it traces the module graph to find the same coupled groups that the
explicit-channel ``Arch`` already names, and its output is a modified ``nn.Module``, not an
``Arch``; here the spec is the source of truth and the weight copy is a few index selects.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from nas.arch import (
    SE,
    Arch,
    AttentionBlock,
    Block,
    ConvBlock,
    DSConvBlock,
    FusedMBConvBlock,
    Head,
    MBConvBlock,
)
from nas.space import make_divisible

__all__ = [
    "CRITERIA",
    "ChannelUnit",
    "LossProbe",
    "PrunePlan",
    "PruneStep",
    "apply_plan",
    "channel_importance",
    "channel_units",
    "drop_layers",
    "droppable",
    "plan_pruning",
    "prune_model",
    "resize_arch",
]

log = logging.getLogger(__name__)

CRITERIA = ("l1", "bn", "taylor", "loss")
_BN_SUFFIXES = ("weight", "bias", "running_mean", "running_var")


def _bn(prefix: str) -> list[tuple[str, int]]:
    return [(f"{prefix}.{s}", 0) for s in _BN_SUFFIXES]


@dataclass(frozen=True)
class ChannelUnit:
    """One set of channels that shrinks together.

    ``tensors``: the (state-dict key, dim) pairs indexed by these channels.  ``layers``: the
    indices (into ``Arch.layers()``) whose spec field ``field_name`` holds the size.
    """

    name: str
    kind: str  # mid | chain | hidden
    size: int
    layers: tuple[int, ...]
    field_name: str  # out_ch | mid_ch | hidden
    tensors: tuple[tuple[str, int], ...]
    prunable: bool = True
    reason: str = ""  # why not prunable


def _prefix(i: int, n_layers: int) -> str:
    if i == 0:
        return "stem"
    if i == n_layers - 1:
        return "head"
    return f"blocks.{i - 1}"


def _out_tensors(block: Block, p: str) -> list[tuple[str, int]]:
    """Tensors indexed by a layer's output channels (it writes them)."""
    if isinstance(block, ConvBlock):
        return [(f"{p}.conv.weight", 0), *_bn(f"{p}.bn1")]
    if isinstance(block, DSConvBlock):
        return [(f"{p}.conv_pw.weight", 0), *_bn(f"{p}.bn2")]
    if isinstance(block, MBConvBlock):
        return [(f"{p}.conv_pwl.weight", 0), *_bn(f"{p}.bn3")]
    if isinstance(block, FusedMBConvBlock):
        return [(f"{p}.conv_pwl.weight", 0), *_bn(f"{p}.bn2")]
    raise ValueError(f"no output-channel rule for block kind {block.kind!r}")


def _se_in_tensors(p: str) -> list[tuple[str, int]]:
    """An SE module's tensors indexed by the channels it gates."""
    return [(f"{p}.se.conv_reduce.weight", 1), (f"{p}.se.conv_expand.weight", 0), (f"{p}.se.conv_expand.bias", 0)]


def _in_tensors(block: Block, p: str, in_ch: int) -> list[tuple[str, int]]:
    """Tensors indexed by a layer's input channels (it reads them)."""
    if isinstance(block, ConvBlock):
        return [(f"{p}.conv.weight", 1)]
    if isinstance(block, DSConvBlock):
        t = [(f"{p}.conv_dw.weight", 0), *_bn(f"{p}.bn1"), (f"{p}.conv_pw.weight", 1)]
        return t + (_se_in_tensors(p) if block.se is not None else [])
    if isinstance(block, MBConvBlock):
        return [(f"{p}.conv_pw.weight", 1)]
    if isinstance(block, FusedMBConvBlock):
        return [(f"{p}.conv_exp.weight", 1)]
    if isinstance(block, AttentionBlock):
        if not block.needs_proj(in_ch):
            raise ValueError("an attention block without input projection is part of its input's chain")
        return [(f"{p}.proj.conv.weight", 1)]
    if isinstance(block, Head):
        if block.style == "pool":
            return [(f"{p}.classifier.weight", 1)]
        return [(f"{p}.conv_head.weight", 1)]
    raise ValueError(f"no input-channel rule for block kind {block.kind!r}")


def _mid_tensors(block: MBConvBlock | FusedMBConvBlock, p: str) -> list[tuple[str, int]]:
    if isinstance(block, MBConvBlock):
        t = [(f"{p}.conv_pw.weight", 0), *_bn(f"{p}.bn1"), (f"{p}.conv_dw.weight", 0), *_bn(f"{p}.bn2"),
             (f"{p}.conv_pwl.weight", 1)]
    else:
        t = [(f"{p}.conv_exp.weight", 0), *_bn(f"{p}.bn1"), (f"{p}.conv_pwl.weight", 1)]
    return t + (_se_in_tensors(p) if block.se is not None else [])


def _hidden_tensors(head: Head) -> list[tuple[str, int]]:
    t = [("head.conv_head.weight", 0), ("head.classifier.weight", 1)]
    if head.style == "conv_pool":
        t += _bn("head.bn2")
    elif head.bias:
        t.append(("head.conv_head.bias", 0))
    return t


def channel_units(arch: Arch) -> list[ChannelUnit]:
    """The prunable channel sets of ``arch`` (see the module docs), in network order."""
    layers = arch.layers()
    keys = arch.keys()
    n = len(layers)
    units: list[ChannelUnit] = []

    # residual chains: a producer and the members whose residual keeps its channels
    chains: list[list[int]] = [[0]]
    for i in range(1, n - 1):
        if layers[i].has_skip(keys[i].in_ch) or (
            isinstance(layers[i], AttentionBlock) and not layers[i].needs_proj(keys[i].in_ch)
        ):
            chains[-1].append(i)
        else:
            chains.append([i])
    for c, members in enumerate(chains):
        consumer = members[-1] + 1
        producer = members[0]
        tensors: list[tuple[str, int]] = []
        frozen = ""
        for i in members:
            b = layers[i]
            if isinstance(b, AttentionBlock):
                frozen = "contains an attention block (embed dim tied to heads)"
                continue
            tensors += _out_tensors(b, _prefix(i, n))
            if i != producer:
                tensors += _in_tensors(b, _prefix(i, n), keys[i].in_ch)
        tensors += _in_tensors(layers[consumer], _prefix(consumer, n), keys[consumer].in_ch)
        units.append(ChannelUnit(
            f"chain{c}:{_prefix(producer, n)}" + (f"..{_prefix(members[-1], n)}" if len(members) > 1 else ""),
            "chain", keys[consumer].in_ch, tuple(members), "out_ch", tuple(dict.fromkeys(tensors)),
            prunable=not frozen, reason=frozen,
        ))
    for i in range(1, n - 1):
        b = layers[i]
        if isinstance(b, (MBConvBlock, FusedMBConvBlock)):
            p = _prefix(i, n)
            units.append(ChannelUnit(f"mid:{p}", "mid", b.mid_ch, (i,), "mid_ch", tuple(_mid_tensors(b, p))))
    if arch.head.hidden:
        units.append(ChannelUnit("hidden:head", "hidden", arch.head.hidden, (n - 1,), "hidden",
                                 tuple(_hidden_tensors(arch.head))))
    return units


# --------------------------------------------------------------------------------------------
# resizing the spec


def _se_channels(se: SE, old_base: int, new_base: int, *, multiple: int, se_ratio: float | None) -> int:
    if new_base == old_base:
        return se.channels
    if se_ratio is not None:
        ch = make_divisible(new_base * se_ratio, multiple)
    else:
        ch = make_divisible(se.channels * new_base / old_base, multiple)
    return min(ch, se.channels)


def resize_arch(arch: Arch, units: Sequence[ChannelUnit], sizes: Mapping[str, int], *, multiple: int,
                se_ratio: float | None = None) -> Arch:
    """``arch`` with each named unit at its new size; SE channels follow (see module docs)."""
    layers = list(arch.layers())
    by_name = {u.name: u for u in units}
    for name, size in sizes.items():
        u = by_name.get(name)
        if u is None:
            raise ValueError(f"unknown pruning unit {name!r}; units: {', '.join(by_name)}")
        if not 1 <= size <= u.size:
            raise ValueError(f"unit {name}: size {size} must be in [1, {u.size}]")
        for i in u.layers:
            layers[i] = dataclasses.replace(layers[i], **{u.field_name: size})
    new = dataclasses.replace(arch, stem=layers[0], blocks=tuple(layers[1:-1]), head=layers[-1])
    # squeeze-excite follows the channels it gates
    old_keys, new_keys = arch.keys(), new.keys()
    changed = False
    for i in range(1, len(layers) - 1):
        b = layers[i]
        se = getattr(b, "se", None)
        if se is None:
            continue
        if isinstance(b, DSConvBlock):
            old_base, new_base = old_keys[i].in_ch, new_keys[i].in_ch
        else:
            old_base, new_base = arch.layers()[i].mid_ch, b.mid_ch
        ch = _se_channels(se, old_base, new_base, multiple=multiple, se_ratio=se_ratio)
        if ch != se.channels:
            layers[i] = dataclasses.replace(b, se=dataclasses.replace(se, channels=ch))
            changed = True
    if changed:
        new = dataclasses.replace(new, blocks=tuple(layers[1:-1]))
    return new


def _skip_pattern(arch: Arch) -> tuple[bool, ...]:
    return tuple(k.block.has_skip(k.in_ch) for k in arch.keys())


def _next_size(size: int, multiple: int) -> int:
    """The next lower multiple of ``multiple`` (one channel group less)."""
    return (size - 1) // multiple * multiple


_STRUCTURAL_KINDS = (DSConvBlock, MBConvBlock, FusedMBConvBlock)


def _branch_bn(block: Block, p: str) -> str:
    """The BatchNorm that ends a block's residual branch (zeroing it makes the block an identity)."""
    return f"{p}.bn3" if isinstance(block, MBConvBlock) else f"{p}.bn2"


def _after_se_conv(block: Block, p: str) -> str:
    """The 1x1 convolution that reads what a block's squeeze-excite gates."""
    return f"{p}.conv_pw.weight" if isinstance(block, DSConvBlock) else f"{p}.conv_pwl.weight"


def droppable(arch: Arch) -> tuple[list[int], list[int]]:
    """Layer indices whose squeeze-excite can be dropped, and residual blocks that can be dropped."""
    keys = arch.keys()
    se, blocks = [], []
    for i, b in enumerate(arch.layers()[1:-1], start=1):
        if not isinstance(b, _STRUCTURAL_KINDS):
            continue
        if b.se is not None:
            se.append(i)
        if b.has_skip(keys[i].in_ch):
            blocks.append(i)
    return se, blocks


def drop_layers(arch: Arch, *, se: Iterable[int] = (), blocks: Iterable[int] = ()) -> Arch:
    """``arch`` without the squeeze-excite of layers ``se`` and without the residual blocks
    ``blocks`` (indices into ``arch.layers()``, as ``droppable`` gives them)."""
    se, blocks = set(se), set(blocks)
    if not se and not blocks:
        return arch
    ok_se, ok_blocks = droppable(arch)
    bad = sorted((se - set(ok_se)) | (blocks - set(ok_blocks)))
    if bad:
        raise ValueError(f"layers {bad} have no squeeze-excite / are not residual blocks that can be dropped")
    layers = list(arch.layers())
    kept = []
    for i in range(1, len(layers) - 1):
        if i in blocks:
            continue
        kept.append(dataclasses.replace(layers[i], se=None) if i in se else layers[i])
    return dataclasses.replace(arch, blocks=tuple(kept))


# --------------------------------------------------------------------------------------------
# importance


def _per_channel(t: torch.Tensor, dim: int, reduce: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    t = t.detach().float().movedim(dim, 0)
    return reduce(t.reshape(t.shape[0], -1))


def _normalised_sum(parts: list[torch.Tensor], size: int) -> np.ndarray:
    total = torch.zeros(size, dtype=torch.float64)
    for v in parts:
        v = v.double()
        m = v.mean()
        total += v / m if m > 0 else v
    return total.numpy()


def _is_bn_weight(key: str, state: Mapping[str, torch.Tensor]) -> bool:
    return key.endswith(".weight") and key[: -len("weight")] + "running_var" in state


def channel_importance(
    model: nn.Module,
    units: Sequence[ChannelUnit],
    criterion: str = "l1",
    *,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, np.ndarray]:
    """Per-channel importance of every unit (higher = keep).  ``taylor`` needs ``batches``;
    ``loss`` orders channels as ``l1`` does (its step costs come from a ``LossProbe``)."""
    if criterion not in CRITERIA:
        raise ValueError(f"prune.criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
    if criterion == "loss":
        criterion = "l1"
    state = dict(model.state_dict())
    for u in units:
        for key, _ in u.tensors:
            if key not in state:
                raise ValueError(f"unit {u.name}: tensor {key!r} is not in the model; does the model match the Arch?")
    out: dict[str, np.ndarray] = {}
    if criterion == "taylor":
        if batches is None:
            raise ValueError("prune.criterion=taylor needs training batches (the gradient of the loss)")
        params = dict(model.named_parameters())
        loss_fn = loss_fn or nn.functional.cross_entropy
        acc = {u.name: torch.zeros(u.size, dtype=torch.float64) for u in units}
        was_training = model.training
        model.eval()  # BN statistics stay as trained; deterministic
        n = 0
        for x, y in batches:
            model.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            for u in units:
                s = torch.zeros(u.size, dtype=torch.float64)
                for key, dim in u.tensors:
                    p = params.get(key)
                    if p is None or p.grad is None:
                        continue
                    s += _per_channel(p * p.grad, dim, lambda t: t.sum(1)).double()
                acc[u.name] += s**2
            n += 1
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        if n == 0:
            raise ValueError("prune.criterion=taylor got no batches")
        return {name: (v / n).numpy() for name, v in acc.items()}
    for u in units:
        parts = []
        for key, dim in u.tensors:
            t = state[key]
            if criterion == "l1" and t.ndim >= 2:
                parts.append(_per_channel(t, dim, lambda t: t.abs().sum(1)))
            elif criterion == "bn" and _is_bn_weight(key, state):
                parts.append(t.detach().abs().float())
        if not parts:  # e.g. a pool_conv head's hidden layer has no BN: its weights' L1 norm stands in
            parts = [_per_channel(state[k], d, lambda t: t.abs().sum(1)) for k, d in u.tensors if state[k].ndim >= 2]
        out[u.name] = _normalised_sum(parts, u.size)
    return out


class LossProbe:
    """The cross-entropy of ``model`` on fixed ``batches`` with pruning steps applied by masking.

    ``loss(sizes, se, blocks)``: units at ``sizes`` (their lowest-``order`` channels removed),
    the squeeze-excite of layers in ``se`` (a mapping layer -> mean gate) replaced by that
    constant gate, the residual blocks in ``blocks`` reduced to identities.  Each is exact for
    what ``apply_plan`` builds: a removed channel's tensors are zeroed in every tensor of its unit
    (its BatchNorm outputs zero, its readers ignore it), a dropped block's last BatchNorm is
    zeroed, a dropped SE's gate is held at its constant (only the squeeze-excite's own reduced
    channels, which follow their block's width, are not masked).  ``gates(...)`` measures the mean gate of
    every squeeze-excite in the network as masked.  The model is used in eval mode, unchanged.
    """

    def __init__(self, model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
                 order: Mapping[str, np.ndarray] | None = None, chunk: int = 256) -> None:
        arch = getattr(model, "arch", None)
        if not isinstance(arch, Arch):
            raise ValueError("LossProbe needs a model built by nas.build.build (with an .arch)")
        xs, ys = zip(*batches) if batches else ((), ())
        if not xs:
            raise ValueError("prune.criterion=loss got no images to measure the loss on")
        x, y = torch.cat(list(xs)), torch.cat(list(ys))
        self.model, self.arch = model, arch
        self.chunks = list(zip(x.split(chunk), y.split(chunk)))
        self.n_images = len(y)
        self.units = {u.name: u for u in channel_units(arch)}
        self.order = dict(order) if order is not None else None
        self.state = {k: v.detach() for k, v in model.state_dict().items()}
        self.evaluations = 0  # forward passes over the images (memoised states are not passed again)
        self._memo: dict[tuple, tuple[float, dict[int, np.ndarray]]] = {}
        n = len(arch.layers())
        self._prefix = {i: _prefix(i, n) for i in range(n)}

    def set_order(self, order: Mapping[str, np.ndarray]) -> None:
        order = {k: np.asarray(v) for k, v in order.items()}
        if self.order is None or order.keys() != self.order.keys() or any(
                not np.array_equal(v, self.order[k]) for k, v in order.items()):
            self._memo.clear()
        self.order = order

    def _overrides(self, sizes: Mapping[str, int], blocks: Iterable[int]) -> dict[str, torch.Tensor]:
        if self.order is None:
            raise ValueError("LossProbe: set the channel order (set_order) before probing")
        out: dict[str, torch.Tensor] = {}
        for name, size in sizes.items():
            u = self.units[name]
            if size >= u.size:
                continue
            idx = torch.as_tensor(np.asarray(self.order[name][: u.size - size], dtype=np.int64))
            for key, dim in u.tensors:
                t = out.get(key)
                if t is None:
                    t = out[key] = self.state[key].clone()
                t.index_fill_(dim, idx, 1.0 if key.endswith("running_var") else 0.0)
        layers = self.arch.layers()
        for i in blocks:
            bn = _branch_bn(layers[i], self._prefix[i])
            for suffix in ("weight", "bias"):
                out[f"{bn}.{suffix}"] = torch.zeros_like(self.state[f"{bn}.{suffix}"])
        return out

    def _run(self, sizes: Mapping[str, int], se: Mapping[int, np.ndarray],
             blocks: Iterable[int]) -> tuple[float, dict[int, np.ndarray]]:
        """Memoised: the state a planning step chose is the next step's base, and nas.train re-plans
        with the same probe, so no state is passed over the images twice."""
        blocks = tuple(sorted(set(blocks)))
        key = (tuple(sorted((n, v) for n, v in sizes.items() if v < self.units[n].size)),
               tuple((i, np.asarray(se[i], dtype=np.float64).tobytes()) for i in sorted(se)), blocks)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._forward(sizes, se, blocks)
        return hit[0], dict(hit[1])

    def _forward(self, sizes: Mapping[str, int], se: Mapping[int, np.ndarray],
                 blocks: tuple[int, ...]) -> tuple[float, dict[int, np.ndarray]]:
        """One pass over the images: the loss, and the mean gate of every squeeze-excite not held
        constant (recorded on every pass: a hook summing a few numbers per image)."""
        from torch.func import functional_call

        params = self._overrides(sizes, blocks)
        hooks, sums = [], {}

        def fix(g: np.ndarray):
            const = torch.as_tensor(g, dtype=torch.float32).view(1, -1, 1, 1)
            return lambda mod, inp, out: const.expand_as(out)

        def keep(i: int):
            def hook(mod, inp, out):
                sums[i] = sums.get(i, 0.0) + out.detach().double().sum(0).flatten()
            return hook

        for i, b in enumerate(self.arch.layers()):
            if getattr(b, "se", None) is None or not isinstance(b, _STRUCTURAL_KINDS):
                continue
            gate = self.model.get_submodule(f"{self._prefix[i]}.se.gate")
            hooks.append(gate.register_forward_hook(fix(se[i]) if i in se else keep(i)))
        was_training = self.model.training
        self.model.eval()
        total = 0.0
        try:
            with torch.no_grad():
                for x, y in self.chunks:
                    logits = functional_call(self.model, params, (x,), strict=False)
                    total += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
        finally:
            for h in hooks:
                h.remove()
            self.model.train(was_training)
        self.evaluations += 1
        return total / self.n_images, {i: (v / self.n_images).numpy() for i, v in sums.items()}

    def loss(self, sizes: Mapping[str, int], se: Mapping[int, np.ndarray] | None = None,
             blocks: Iterable[int] = ()) -> float:
        return self._run(sizes, se or {}, blocks)[0]

    def gates(self, sizes: Mapping[str, int], se: Mapping[int, np.ndarray] | None = None,
              blocks: Iterable[int] = ()) -> tuple[float, dict[int, np.ndarray]]:
        """The loss, and the mean gate of every squeeze-excite not yet dropped."""
        return self._run(sizes, se or {}, blocks)


# --------------------------------------------------------------------------------------------
# planning


class _Candidate(NamedTuple):
    """One step the greedy planner may take, and the state after it."""

    name: str  # unit name, se:<block> or block:<block>
    size: int  # the unit's size after the step (0 for a structural step)
    sizes: Mapping[str, int]  # every unit's size after the step
    se: tuple[int, ...]  # layers whose squeeze-excite is dropped after the step
    blocks: tuple[int, ...]  # residual blocks dropped after the step
    arch: Arch
    cost: float  # importance removed (l1 / bn / taylor) or measured loss increase (loss)


@dataclass(frozen=True)
class PruneStep:
    unit: str
    size: int  # the unit's size after the step
    predicted_ms: float
    importance_removed: float


@dataclass(frozen=True)
class PrunePlan:
    """What to keep.  ``keep[name]``: the kept channel indices of each unit (ascending)."""

    original: Arch
    arch: Arch
    keep: tuple[tuple[str, tuple[int, ...]], ...]
    criterion: str
    multiple: int
    se_ratio: float | None
    predicted_ms_before: float
    predicted_ms_after: float
    target_ms: float
    reached: bool
    steps: tuple[PruneStep, ...] = field(default=())
    # structural steps (criterion loss): layer index (into original.layers()) -> the mean gate its
    # dropped squeeze-excite is replaced with; the residual blocks dropped
    dropped_se: tuple[tuple[int, tuple[float, ...]], ...] = field(default=())
    dropped_blocks: tuple[int, ...] = field(default=())

    def keep_map(self) -> dict[str, tuple[int, ...]]:
        return dict(self.keep)

    def to_dict(self) -> dict[str, Any]:
        return {
            "original": self.original.to_dict(),
            "arch": self.arch.to_dict(),
            "keep": {k: list(v) for k, v in self.keep},
            "criterion": self.criterion,
            "multiple": self.multiple,
            "se_ratio": self.se_ratio,
            "predicted_ms_before": self.predicted_ms_before,
            "predicted_ms_after": self.predicted_ms_after,
            "target_ms": self.target_ms,
            "reached": self.reached,
            "steps": [dataclasses.asdict(s) for s in self.steps],
            "dropped_se": {str(i): list(g) for i, g in self.dropped_se},
            "dropped_blocks": list(self.dropped_blocks),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PrunePlan:
        return cls(
            Arch.from_dict(d["original"]), Arch.from_dict(d["arch"]),
            tuple((k, tuple(int(i) for i in v)) for k, v in d["keep"].items()), d["criterion"], int(d["multiple"]),
            d["se_ratio"], float(d["predicted_ms_before"]), float(d["predicted_ms_after"]), float(d["target_ms"]),
            bool(d["reached"]), tuple(PruneStep(**s) for s in d.get("steps", ())),
            tuple((int(i), tuple(float(v) for v in g)) for i, g in d.get("dropped_se", {}).items()),
            tuple(int(i) for i in d.get("dropped_blocks", ())),
        )


def plan_pruning(
    arch: Arch,
    importance: Mapping[str, np.ndarray],
    latency: Callable[[Sequence[Arch]], np.ndarray],
    *,
    target_ms: float,
    multiple: int,
    se_ratio: float | None = None,
    criterion: str = "l1",
    min_channels: int | None = None,
    min_keep: float = 0.25,
    max_steps: int = 10_000,
    lookahead: int = 4,
    probe: LossProbe | None = None,
    structural: bool = True,
) -> PrunePlan:
    """Greedy latency-aware plan (see the module docs).

    ``latency(archs)`` returns predicted ms for each Arch (e.g. ``LatencyModel.predict``);
    ``importance`` maps unit names to per-channel scores (``channel_importance``).  Every unit
    keeps at least ``min_keep`` of its channels and at least ``min_channels`` (default: one
    group).  The cost of a step is the share of its unit's importance it removes (``l1``,
    ``bn``: magnitudes are comparable only within a layer) or, for ``taylor`` (an estimate of
    the loss change, comparable across layers), the removed importance over the mean of all;
    for ``loss``, the increase of ``probe``'s measured loss, and with ``structural`` the
    candidates include dropping a squeeze-excite or a residual block.
    Each unit is tried at its next ``lookahead`` lower multiples: on a device whose kernels
    work in wider tiles than the channel multiple (channels padded to the SIMD width), removing
    one group can leave the latency unchanged while removing two lowers it.
    """
    if not 0 <= min_keep <= 1:
        raise ValueError(f"prune.min_keep must be in [0, 1], got {min_keep}")
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"channel multiple must be a positive integer, got {multiple}")
    if not target_ms > 0:
        raise ValueError(f"prune target must be > 0 ms, got {target_ms}")
    if isinstance(lookahead, bool) or not isinstance(lookahead, int) or lookahead < 1:
        raise ValueError(f"prune lookahead must be a positive integer (channel groups), got {lookahead}")
    if criterion == "loss" and probe is None:
        raise ValueError("prune.criterion=loss needs a LossProbe (training images to measure the loss on)")
    if probe is not None and probe.arch != arch:
        raise ValueError("the LossProbe's model is not the Arch being pruned")
    min_channels = multiple if min_channels is None else min_channels
    units = [u for u in channel_units(arch) if u.prunable]
    for u in units:
        imp = importance.get(u.name)
        if imp is None or len(imp) != u.size:
            raise ValueError(f"importance for unit {u.name} must have {u.size} values, got "
                             f"{None if imp is None else len(imp)}")
    order = {u.name: np.argsort(np.asarray(importance[u.name], dtype=np.float64), kind="stable") for u in units}
    use_loss = criterion == "loss"
    if use_loss:
        probe.set_order(order)
    weight = _step_costs(units, importance, criterion)
    floor = {u.name: max(min_channels, int(np.ceil(min_keep * u.size))) for u in units}
    sizes = {u.name: u.size for u in units}
    pattern = _skip_pattern(arch)
    se_ok, blocks_ok = droppable(arch) if use_loss and structural else ([], [])
    n_layers = len(arch.layers())
    dropped_se: dict[int, np.ndarray] = {}
    dropped_blocks: set[int] = set()

    def shape(sz: Mapping[str, int], se: Iterable[int], blocks: Iterable[int]) -> Arch:
        return drop_layers(resize_arch(arch, units, sz, multiple=multiple, se_ratio=se_ratio), se=se, blocks=blocks)

    def gone(u: ChannelUnit) -> bool:  # a unit that lives only in dropped blocks
        return all(i in dropped_blocks for i in u.layers)

    before = float(latency([arch])[0])
    current, ms = arch, before
    steps: list[PruneStep] = []
    blocked: set[str] = set()
    while ms > target_ms and len(steps) < max_steps:
        cands: list[_Candidate] = []
        for u in units:
            if u.name in blocked or gone(u):
                continue
            new_size, tried = sizes[u.name], 0
            while tried < lookahead:
                new_size = _next_size(new_size, multiple)
                if new_size < floor[u.name]:
                    break
                tried += 1
                sz = {**sizes, u.name: new_size}
                resized = resize_arch(arch, units, sz, multiple=multiple, se_ratio=se_ratio)
                if _skip_pattern(resized) != pattern:  # would add a residual: not this width
                    continue
                removed = order[u.name][u.size - sizes[u.name]: u.size - new_size]
                cands.append(_Candidate(u.name, new_size, sz, tuple(dropped_se), tuple(dropped_blocks),
                                        drop_layers(resized, se=dropped_se, blocks=dropped_blocks),
                                        float(weight[u.name][removed].sum())))
            if not tried:
                blocked.add(u.name)
        for i in se_ok:
            if i not in dropped_se and i not in dropped_blocks:
                cands.append(_Candidate(f"se:{_prefix(i, n_layers)}", 0, sizes, (*dropped_se, i),
                                        tuple(dropped_blocks), shape(sizes, (*dropped_se, i), dropped_blocks), 0.0))
        for i in blocks_ok:
            if i not in dropped_blocks:
                se_left = tuple(j for j in dropped_se if j != i)
                cands.append(_Candidate(f"block:{_prefix(i, n_layers)}", 0, sizes, se_left, (*dropped_blocks, i),
                                        shape(sizes, se_left, (*dropped_blocks, i)), 0.0))
        if not cands:
            break
        preds = np.asarray(latency([c.arch for c in cands]), dtype=np.float64)
        savings = ms - preds
        gates: dict[int, np.ndarray] = {}
        if use_loss:
            base, gates = probe.gates(sizes, dropped_se, dropped_blocks)
            gates.update(dropped_se)
        best, best_score = -1, -np.inf
        finish, finish_key = -1, (np.inf, 0.0)  # the cheapest step that reaches the target on its own
        for j, c in enumerate(cands):
            if savings[j] <= 0:
                continue
            if use_loss:
                c = cands[j] = c._replace(cost=max(probe.loss(c.sizes, {i: gates[i] for i in c.se}, c.blocks) - base,
                                                   0.0))
            score = savings[j] / (c.cost + (1e-6 if use_loss else 1e-9))
            if score > best_score:
                best, best_score = j, score
            if preds[j] <= target_ms and (c.cost, -savings[j]) < finish_key:
                finish, finish_key = j, (c.cost, -savings[j])
        if finish >= 0 and cands[finish].cost <= cands[best].cost:  # the last step: a cheaper one that
            best = finish  # reaches the target beats a big one that overshoots it (a dropped block)
        if best < 0:
            log.info("no pruning step lowers the predicted latency further (%.4f ms)", ms)
            break
        c = cands[best]
        current, sizes, dropped_blocks = c.arch, dict(c.sizes), set(c.blocks)
        dropped_se = {i: gates[i] for i in c.se}
        ms = float(preds[best])
        steps.append(PruneStep(c.name, c.size, ms, c.cost))
        if use_loss:
            log.info("prune step %d: %s%s, %.4f ms predicted, loss +%.4f (%d probe passes so far)", len(steps),
                     c.name, f" -> {c.size}" if c.size else " dropped", ms, c.cost, probe.evaluations)
        else:
            log.debug("prune %s -> %d: %.4f ms", c.name, c.size, ms)
    keep = tuple(
        (u.name, tuple(sorted(int(i) for i in order[u.name][u.size - sizes[u.name]:])))
        for u in units if sizes[u.name] != u.size
    )
    reached = ms <= target_ms
    if not reached:
        log.warning("pruning stopped at %.4f ms predicted, above the target %.4f ms", ms, target_ms)
    return PrunePlan(arch, current, keep, criterion, multiple, se_ratio, before, ms, float(target_ms), reached,
                     tuple(steps), tuple((i, tuple(float(v) for v in g)) for i, g in sorted(dropped_se.items())),
                     tuple(sorted(dropped_blocks)))


def _step_costs(units: Sequence[ChannelUnit], importance: Mapping[str, np.ndarray],
                criterion: str) -> dict[str, np.ndarray]:
    imp = {u.name: np.clip(np.asarray(importance[u.name], dtype=np.float64), 0.0, None) for u in units}
    if criterion == "taylor":
        allv = np.concatenate(list(imp.values())) if imp else np.ones(1)
        m = allv.mean() if allv.size and allv.mean() > 0 else 1.0
        return {k: v / m for k, v in imp.items()}
    return {k: v / v.sum() if v.sum() > 0 else np.full_like(v, 1.0 / max(len(v), 1)) for k, v in imp.items()}


# --------------------------------------------------------------------------------------------
# copying the kept channels


def _se_keep(old: nn.Module | None, new_channels: int, kept_in: torch.Tensor | None) -> torch.Tensor | None:
    """The SE channels (of ``old``'s reduce conv) to keep: largest L1 norm."""
    if old is None:
        return None
    wr = old.conv_reduce.weight.detach()
    we = old.conv_expand.weight.detach()
    if kept_in is not None:
        wr, we = wr[:, kept_in], we[kept_in]
    score = wr.abs().flatten(1).sum(1) + we.abs().sum((0, 2, 3))
    top = torch.topk(score, new_channels).indices
    return torch.sort(top).values


def apply_plan(model: nn.Module, plan: PrunePlan) -> nn.Module:
    """``build(plan.arch)`` carrying ``model``'s weights for the kept channels (eval mode).

    A dropped squeeze-excite's mean gate is folded into the 1x1 convolution after it; a dropped
    residual block's tensors are left out and the blocks after it move up one index."""
    from nas.build import build

    if getattr(model, "arch", plan.original) != plan.original:
        raise ValueError("the model's Arch is not the plan's original Arch")
    units = {u.name: u for u in channel_units(plan.original)}
    index: dict[str, dict[int, torch.Tensor]] = {}
    for name, kept in plan.keep:
        u = units.get(name)
        if u is None:
            raise ValueError(f"plan names unit {name!r}, which the original Arch does not have")
        idx = torch.tensor(kept, dtype=torch.long)
        for key, dim in u.tensors:
            index.setdefault(key, {})[dim] = idx
    old_layers = plan.original.layers()
    n = len(old_layers)
    dropped_se = dict(plan.dropped_se)
    survivors = [i for i in range(n) if i not in plan.dropped_blocks]
    new_of = {i: j for j, i in enumerate(survivors)}  # old layer index -> new
    new_layers = plan.arch.layers()
    if len(new_layers) != len(survivors):
        raise ValueError("the plan's Arch does not have the layers its dropped blocks leave")
    # squeeze-excite channels
    for i, ob in enumerate(old_layers):
        if i not in new_of:
            continue
        nb = new_layers[new_of[i]]
        ose, nse = getattr(ob, "se", None), getattr(nb, "se", None)
        if ose is None or nse is None or ose.channels == nse.channels:
            continue
        p = _prefix(i, n)
        se_mod = model.get_submodule(f"{p}.se")
        base_key = f"{p}.se.conv_reduce.weight"
        kept_in = index.get(base_key, {}).get(1)
        sel = _se_keep(se_mod, nse.channels, kept_in)
        for key, dim in ((f"{p}.se.conv_reduce.weight", 0), (f"{p}.se.conv_reduce.bias", 0),
                         (f"{p}.se.conv_expand.weight", 1)):
            index.setdefault(key, {})[dim] = sel
    state = dict(model.state_dict())
    for i, gate in dropped_se.items():  # x * gate -> the next 1x1 conv's input channels scaled by the gate
        key = _after_se_conv(old_layers[i], _prefix(i, n))
        g = torch.as_tensor(gate, dtype=state[key].dtype)
        if g.numel() != state[key].shape[1]:
            raise ValueError(f"plan's mean gate for layer {i} has {g.numel()} channels, {key} reads "
                             f"{state[key].shape[1]}")
        state[key] = state[key] * g.view(1, -1, 1, 1)
    gone = tuple(f"{_prefix(i, n)}.se." for i in dropped_se) + tuple(f"{_prefix(i, n)}." for i in plan.dropped_blocks)
    rename = {f"{_prefix(i, n)}.": f"{_prefix(new_of[i], len(survivors))}." for i in survivors
              if _prefix(i, n) != _prefix(new_of[i], len(survivors))}
    new = build(plan.arch)
    target = new.state_dict()
    out = {}
    for key, t in state.items():
        if key.startswith(gone):
            continue
        for dim, idx in index.get(key, {}).items():
            t = t.index_select(dim, idx)
        head, _, rest = key.partition(".")
        if head == "blocks":
            blk, _, rest = rest.partition(".")
            pre = f"blocks.{blk}."
            key = rename.get(pre, pre) + rest
        if key in target and t.shape != target[key].shape:
            raise ValueError(f"pruned tensor {key} has shape {tuple(t.shape)}, the pruned Arch wants "
                             f"{tuple(target[key].shape)}")
        out[key] = t
    new.load_state_dict(out, strict=True)
    return new.eval()


def prune_model(
    model: nn.Module,
    latency: Callable[[Sequence[Arch]], np.ndarray],
    *,
    target_ms: float,
    multiple: int,
    criterion: str = "l1",
    se_ratio: float | None = None,
    min_keep: float = 0.25,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> tuple[nn.Module, PrunePlan]:
    """Importance -> plan -> sliced model, in one call.  ``model`` must have an ``arch``."""
    arch = getattr(model, "arch", None)
    if not isinstance(arch, Arch):
        raise ValueError("prune_model needs a model built by nas.build.build (with an .arch)")
    units = channel_units(arch)
    batches = list(batches) if batches is not None else None
    imp = channel_importance(model, units, criterion, batches=batches)
    probe = LossProbe(model, batches or []) if criterion == "loss" else None
    plan = plan_pruning(arch, imp, latency, target_ms=target_ms, multiple=multiple, se_ratio=se_ratio,
                        criterion=criterion, min_keep=min_keep, probe=probe)
    return apply_plan(model, plan), plan
