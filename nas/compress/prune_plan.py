"""The pruning planner: ``plan_pruning`` (greedy, latency-aware; see ``nas.compress.prune`` for the
method), its result ``PrunePlan`` / ``PruneStep``, and ``LossProbe``, the measured-loss cost of
a step (``criterion=loss``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from nas.arch import Arch
from nas.narrow import (
    STRUCTURAL_KINDS,
    ChannelUnit,
    branch_bn,
    channel_units,
    drop_layers,
    droppable,
    layer_prefix,
    next_size,
    resize_arch,
    skip_pattern,
)

__all__ = ["LossProbe", "PrunePlan", "PruneStep", "plan_pruning"]

log = logging.getLogger(__name__)


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
            raise ValueError("LossProbe needs a model built by nas.builder.build (with an .arch)")
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
        self.layer_prefix = {i: layer_prefix(i, n) for i in range(n)}

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
            bn = branch_bn(layers[i], self.layer_prefix[i])
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
            if getattr(b, "se", None) is None or not isinstance(b, STRUCTURAL_KINDS):
                continue
            gate = self.model.get_submodule(f"{self.layer_prefix[i]}.se.gate")
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
    min_gain_ms: float = 0.0,
) -> PrunePlan:
    """Greedy latency-aware plan (see the module docs).

    ``latency(archs)`` returns predicted ms for each Arch (e.g. ``LatencyModel.predict``);
    ``importance`` maps unit names to per-channel scores (``channel_importance``).  Every unit
    keeps at least ``min_keep`` of its channels and at least ``min_channels`` (default: one
    group).  The cost of a step is the share of its unit's importance it removes (``l1``,
    ``bn``: magnitudes are comparable only within a layer) or, for ``taylor`` (an estimate of
    the loss change, comparable across layers), the removed importance over the mean of all;
    for ``loss``, the increase of ``probe``'s measured loss, and with ``structural`` the
    candidates include dropping a squeeze-excite or a residual block.  The plan stops before a step that
    saves less than ``min_gain_ms``: a step whose gain is below what the latency model can tell apart
    does not pay for the accuracy it costs.
    Each unit is tried at its next ``lookahead`` lower multiples: on a device whose kernels
    work in wider tiles than the channel multiple (channels padded to the SIMD width), removing
    one group can leave the latency unchanged while removing two lowers it.
    """
    _check_plan_args(arch, probe, min_keep=min_keep, multiple=multiple, target_ms=target_ms, lookahead=lookahead,
                     criterion=criterion)
    min_channels = multiple if min_channels is None else min_channels
    units = [u for u in channel_units(arch) if u.prunable]
    _check_importance(units, importance)
    use_loss = criterion == "loss"
    moves = _Moves(arch, units, importance, criterion=criterion, min_channels=min_channels, min_keep=min_keep,
                   multiple=multiple, se_ratio=se_ratio, lookahead=lookahead, structural=use_loss and structural)
    if use_loss:
        probe.set_order(moves.order)
    sizes = {u.name: u.size for u in units}
    dropped_se: dict[int, np.ndarray] = {}
    dropped_blocks: set[int] = set()

    before = float(latency([arch])[0])
    current, ms = arch, before
    steps: list[PruneStep] = []
    blocked: set[str] = set()
    while ms > target_ms and len(steps) < max_steps:
        cands = moves.candidates(sizes, dropped_se, dropped_blocks, blocked)
        if not cands:
            break
        preds = np.asarray(latency([c.arch for c in cands]), dtype=np.float64)
        savings = ms - preds
        gates, loss_cost = _loss_costs(probe, sizes, dropped_se, dropped_blocks) if use_loss else ({}, None)
        best = _pick_step(cands, preds, savings, target_ms, loss_cost)
        if best < 0:
            log.info("no pruning step lowers the predicted latency further (%.4f ms)", ms)
            break
        if savings[best] < min_gain_ms:
            log.info("pruning stops: the next step saves %.5f ms < %.5f ms (min_gain)", savings[best], min_gain_ms)
            break
        c = cands[best]
        current, sizes, dropped_blocks = c.arch, dict(c.sizes), set(c.blocks)
        dropped_se = {i: gates[i] for i in c.se}
        ms = float(preds[best])
        steps.append(PruneStep(c.name, c.size, ms, c.cost))
        log.log(logging.INFO if use_loss else logging.DEBUG, "prune step %d: %s%s, %.4f ms predicted, cost %.4f",
                len(steps), c.name, f" -> {c.size}" if c.size else " dropped", ms, c.cost)
    reached = ms <= target_ms
    if not reached:
        log.warning("pruning stopped at %.4f ms predicted, above the target %.4f ms", ms, target_ms)
    return PrunePlan(arch, current, moves.keep(sizes), criterion, multiple, se_ratio, before, ms, float(target_ms),
                     reached, tuple(steps),
                     tuple((i, tuple(float(v) for v in g)) for i, g in sorted(dropped_se.items())),
                     tuple(sorted(dropped_blocks)))


class _Moves:
    """The steps a plan can take on ``arch``: each prunable unit shrunk toward its floor (``min_keep``
    of it, at least ``min_channels``), its channels removed in ascending importance (``order``), each
    costing its ``weight``; with ``structural``, a squeeze-excite or a residual block dropped."""

    def __init__(self, arch: Arch, units: Sequence[ChannelUnit], importance: Mapping[str, np.ndarray], *,
                 criterion: str, min_channels: int, min_keep: float, multiple: int, se_ratio: float | None,
                 lookahead: int, structural: bool) -> None:
        self.arch, self.units = arch, units
        self.order = {u.name: np.argsort(np.asarray(importance[u.name], dtype=np.float64), kind="stable")
                      for u in units}
        self.weight = _step_costs(units, importance, criterion)
        self.floor = {u.name: max(min_channels, int(np.ceil(min_keep * u.size))) for u in units}
        self.multiple, self.se_ratio, self.lookahead = multiple, se_ratio, lookahead
        self.pattern = skip_pattern(arch)
        self.se_ok, self.blocks_ok = droppable(arch) if structural else ([], [])
        self.n_layers = len(arch.layers())

    def shape(self, sz: Mapping[str, int], se: Iterable[int], blocks: Iterable[int]) -> Arch:
        narrowed = resize_arch(self.arch, self.units, sz, multiple=self.multiple, se_ratio=self.se_ratio)
        return drop_layers(narrowed, se=se, blocks=blocks)

    def candidates(self, sizes: Mapping[str, int], dropped_se: Mapping[int, Any], dropped_blocks: set[int],
                   blocked: set[str]) -> list[_Candidate]:
        """Every step from the plan so far; a unit that cannot shrink any more joins ``blocked``, and
        a unit that lives only in dropped blocks is left alone."""
        cands: list[_Candidate] = []
        for u in self.units:
            if u.name in blocked or all(i in dropped_blocks for i in u.layers):
                continue
            got = _channel_steps(self.arch, self.units, u, sizes, self.order, self.weight, dropped_se, dropped_blocks,
                                 floor=self.floor[u.name], multiple=self.multiple, se_ratio=self.se_ratio,
                                 lookahead=self.lookahead, pattern=self.pattern)
            if got is None:
                blocked.add(u.name)
            else:
                cands += got
        return cands + _structural_steps(self.se_ok, self.blocks_ok, sizes, dropped_se, dropped_blocks, self.shape,
                                         self.n_layers)

    def keep(self, sizes: Mapping[str, int]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The kept channel indices (ascending) of every unit narrowed to ``sizes``."""
        return tuple(
            (u.name, tuple(sorted(int(i) for i in self.order[u.name][u.size - sizes[u.name]:])))
            for u in self.units if sizes[u.name] != u.size
        )


def _check_plan_args(arch: Arch, probe: LossProbe | None, *, min_keep: float, multiple: int, target_ms: float,
                     lookahead: int, criterion: str) -> None:
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


def _check_importance(units: Sequence[ChannelUnit], importance: Mapping[str, np.ndarray]) -> None:
    for u in units:
        imp = importance.get(u.name)
        if imp is None or len(imp) != u.size:
            raise ValueError(f"importance for unit {u.name} must have {u.size} values, got "
                             f"{None if imp is None else len(imp)}")


def _channel_steps(arch: Arch, units: Sequence[ChannelUnit], u: ChannelUnit, sizes: Mapping[str, int],
                   order: Mapping[str, np.ndarray], weight: Mapping[str, np.ndarray], dropped_se: Mapping[int, Any],
                   dropped_blocks: set[int], *, floor: int, multiple: int, se_ratio: float | None, lookahead: int,
                   pattern: tuple[bool, ...]) -> list[_Candidate] | None:
    """The candidate steps shrinking unit ``u`` by 1 .. ``lookahead`` groups; None when it cannot
    shrink at all (at its floor)."""
    cands = []
    new_size, tried = sizes[u.name], 0
    while tried < lookahead:
        new_size = next_size(new_size, multiple)
        if new_size < floor:
            break
        tried += 1
        sz = {**sizes, u.name: new_size}
        resized = resize_arch(arch, units, sz, multiple=multiple, se_ratio=se_ratio)
        if skip_pattern(resized) != pattern:  # would add a residual: not this width
            continue
        removed = order[u.name][u.size - sizes[u.name]: u.size - new_size]
        cands.append(_Candidate(u.name, new_size, sz, tuple(dropped_se), tuple(dropped_blocks),
                                drop_layers(resized, se=dropped_se, blocks=dropped_blocks),
                                float(weight[u.name][removed].sum())))
    return cands if tried else None


def _structural_steps(se_ok: Sequence[int], blocks_ok: Sequence[int], sizes: Mapping[str, int],
                      dropped_se: Mapping[int, Any], dropped_blocks: set[int],
                      shape: Callable[..., Arch], n_layers: int) -> list[_Candidate]:
    """The candidate steps dropping a squeeze-excite or a residual block not dropped yet."""
    cands = []
    for i in se_ok:
        if i not in dropped_se and i not in dropped_blocks:
            cands.append(_Candidate(f"se:{layer_prefix(i, n_layers)}", 0, sizes, (*dropped_se, i),
                                    tuple(dropped_blocks), shape(sizes, (*dropped_se, i), dropped_blocks), 0.0))
    for i in blocks_ok:
        if i not in dropped_blocks:
            se_left = tuple(j for j in dropped_se if j != i)
            cands.append(_Candidate(f"block:{layer_prefix(i, n_layers)}", 0, sizes, se_left, (*dropped_blocks, i),
                                    shape(sizes, se_left, (*dropped_blocks, i)), 0.0))
    return cands


def _loss_costs(probe: LossProbe, sizes: Mapping[str, int], dropped_se: Mapping[int, np.ndarray],
                dropped_blocks: set[int]) -> tuple[dict[int, np.ndarray], Callable[[_Candidate], float]]:
    """The mean gate of every squeeze-excite as the plan stands (a dropped one keeps its constant),
    and a step's cost for ``criterion=loss``: the increase of the probe's loss it causes (never below 0)."""
    base, gates = probe.gates(sizes, dropped_se, dropped_blocks)
    gates.update(dropped_se)
    return gates, lambda c: max(probe.loss(c.sizes, {i: gates[i] for i in c.se}, c.blocks) - base, 0.0)


def _pick_step(cands: list[_Candidate], preds: np.ndarray, savings: np.ndarray, target_ms: float,
               loss_cost: Callable[[_Candidate], float] | None) -> int:
    """The index of the step with the largest saving per cost (-1: none saves anything); with
    ``loss_cost`` (criterion=loss) each saving candidate's cost is measured first (and stored in
    ``cands``).  A cheaper step that reaches the target on its own beats a bigger one."""
    best, best_score = -1, -np.inf
    finish, finish_key = -1, (np.inf, 0.0)  # the cheapest step that reaches the target on its own
    for j, c in enumerate(cands):
        if savings[j] <= 0:
            continue
        if loss_cost is not None:
            c = cands[j] = c._replace(cost=loss_cost(c))
        score = savings[j] / (c.cost + (1e-6 if loss_cost is not None else 1e-9))
        if score > best_score:
            best, best_score = j, score
        if preds[j] <= target_ms and (c.cost, -savings[j]) < finish_key:
            finish, finish_key = j, (c.cost, -savings[j])
    if finish >= 0 and cands[finish].cost <= cands[best].cost:  # the last step: a cheaper one that
        best = finish  # reaches the target beats a big one that overshoots it (a dropped block)
    return best


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
