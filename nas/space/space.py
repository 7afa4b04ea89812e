"""A search space: its parts (``nas.space.parse``) turned into parameters, architectures and blocks."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from nas.arch import (
    SE,
    Arch,
    AttentionBlock,
    Block,
    BlockKey,
    ConvBlock,
    DSConvBlock,
    FusedMBConvBlock,
    Head,
    MBConvBlock,
    content_digest,
)
from nas.cost import arch_cost
from nas.space.parse import LIMITS_DOC, STAGE_KINDS, SpaceError, StageSpec, parse_space

__all__ = ["MAX_PARAMS", "MAX_PEAK_ACTIVATION_BYTES", "SearchSpace", "make_divisible"]

MAX_PARAMS = 1_000_000_000  # weights of a space's largest architecture (4 GB in fp32)
MAX_PEAK_ACTIVATION_BYTES = 16 << 30  # a space's largest architecture's peak activation memory at batch 1 (fp32)


def make_divisible(v: float, divisor: int) -> int:
    """Round a width to a multiple of ``divisor``, as timm and MobileNet do.

    Args:
        v: The width wanted (``in_ch * expansion``, ...).
        divisor: The multiple (a space's ``channel_multiple``).

    Returns:
        The nearest multiple of ``divisor``: never below ``divisor``, never more than 10% below ``v``.
    """
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class SearchSpace:
    """A validated search space: named parameters whose choices decode to an ``Arch``.

    Build it with :func:`load_space` (a shipped name or a YAML path), or from the mapping a YAML
    file holds (docs/spaces.md, "The YAML format").

    Args:
        config: The space's mapping, as loaded from YAML.
        source: Where it came from, for messages (a file path).

    Raises:
        SpaceError: The mapping is malformed or exceeds a limit (docs/spaces.md, "Limits"): those of
            ``nas.space.parse``, and ``MAX_PARAMS`` weights in the largest architecture.

    Example:
        >>> from nas import load_space
        >>> space = load_space("tiny")
        >>> arch = space.random(0)  # seeded
        >>> arch == space.random(0) and space.smallest().label() != space.largest().label()
        True
    """

    def __init__(self, config: dict[str, Any], *, source: str = "<dict>") -> None:
        self.source = source
        p = parse_space(config, source=source)  # validated (nas.space.parse), else a SpaceError
        self.name, self.description = p.name, p.description
        self.channel_multiple: int = p.channel_multiple
        self.in_chans, self.resolution, self.num_classes = p.in_chans, p.resolution, p.num_classes
        self.se_ratio, self.se_gate, self.se_act = p.se_ratio, p.se_gate, p.se_act
        self.stem_widths, self.stem_kernel, self.stem_stride, self.stem_act = (
            p.stem_widths, p.stem_kernel, p.stem_stride, p.stem_act)
        self.stages: list[StageSpec] = p.stages
        self.head_style, self.head_hidden, self.head_act, self.head_bias = (
            p.head_style, p.head_hidden, p.head_act, p.head_bias)
        self._final_hw = p.final_hw
        self._choices = self._param_choices()
        self.config: dict[str, Any] = copy.deepcopy(config)  # as loaded: rebuilds the space (SearchSpace(config))
        cost = arch_cost(self.largest())
        if cost.params > MAX_PARAMS:
            raise SpaceError(f"{source}: its largest architecture has {cost.params:.3g} weights, more than the limit "
                             f"of {MAX_PARAMS:.3g}; narrow its widths or lower its depths ({LIMITS_DOC})")
        if cost.peak_activation_bytes > MAX_PEAK_ACTIVATION_BYTES:
            raise SpaceError(f"{source}: its largest architecture needs {cost.peak_activation_bytes / 2**30:.3g} GiB of "
                             f"activations at once (batch 1, fp32, at {self.resolution}x{self.resolution}), more than "
                             f"the limit of {MAX_PEAK_ACTIVATION_BYTES >> 30} GiB; lower input.resolution or narrow its "
                             f"widths ({LIMITS_DOC})")

    def digest(self) -> str:
        """A stable identity of the space's definition.

        Returns:
            16 hex digits of the sha1 of the canonical JSON of its mapping (its source path is not
            part of it).
        """
        return content_digest(self.config)

    # ------------------------------------------------------------------------------------
    # the parameter encoding

    def param_choices(self) -> dict[str, tuple[Any, ...]]:
        """Every parameter and its choices.

        Returns:
            ``{name: choices}`` in sampling order, one entry per block slot of the deepest stages
            (so the same length for every architecture): ``stem_width``, ``s<i>_depth``,
            ``s<i>_width``, ``s<i>_b<j>_<option>``, ``head_hidden``.
        """
        return dict(self._choices)

    def _param_choices(self) -> dict[str, tuple[Any, ...]]:
        out: dict[str, tuple[Any, ...]] = {"stem_width": self.stem_widths}
        for i, st in enumerate(self.stages):
            out[f"s{i}_depth"] = st.depth
            out[f"s{i}_width"] = st.width
            for j in range(st.max_depth):
                for name in STAGE_KINDS[st.kind]:
                    out[f"s{i}_b{j}_{name}"] = st.options[name]
        out["head_hidden"] = self.head_hidden
        return out

    def sample(self, trial: Any) -> Arch:
        """Sample an architecture from an Optuna trial.

        Args:
            trial: An ``optuna.Trial``: ``suggest_categorical`` is called on every parameter of
                :meth:`param_choices`.

        Returns:
            The decoded ``Arch``.
        """
        params = {name: trial.suggest_categorical(name, list(ch)) for name, ch in self._choices.items()}
        return self.decode(params)

    def sample_params(self, rng: np.random.Generator | int | None = None) -> dict[str, Any]:
        """Draw one choice of every parameter, uniformly.

        Args:
            rng: A ``numpy.random.Generator``, or a seed for one (None: unseeded).

        Returns:
            ``{name: choice}`` for every parameter of :meth:`param_choices`.
        """
        rng = np.random.default_rng(rng)
        return {name: ch[int(rng.integers(len(ch)))] for name, ch in self._choices.items()}

    def sample_indices(self, n: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """Draw ``n`` parameter vectors at once, as choice indices.

        Args:
            n: How many.
            rng: A ``numpy.random.Generator``, or a seed for one (None: unseeded).

        Returns:
            An integer array of shape ``(n, len(param_choices()))``: row ``r``, column ``k`` indexes
            the choices of the ``k``-th parameter; :meth:`decode_indices` turns a row into an Arch.
        """
        rng = np.random.default_rng(rng)
        sizes = [len(ch) for ch in self._choices.values()]
        return np.stack([rng.integers(s, size=n) for s in sizes], axis=1)

    def decode_indices(self, idx: Sequence[int]) -> Arch:
        """Decode one row of :meth:`sample_indices`.

        Args:
            idx: One choice index per parameter, in :meth:`param_choices` order.

        Returns:
            The ``Arch``.
        """
        ch = self._choices
        return self.decode({name: c[int(i)] for (name, c), i in zip(ch.items(), idx)})

    def smallest(self) -> Arch:
        """The architecture with the smallest choice of every parameter (fewest blocks, narrowest,
        smallest kernels and expansions, no squeeze-excite, fewest heads): a lower bound on latency and
        memory in all but contrived spaces.  Only its own blocks are chosen and made."""
        return self._extreme(min)

    def largest(self) -> Arch:
        """The architecture with the largest choice of every parameter (deepest, widest, largest kernels
        and expansions, squeeze-excite wherever it is a choice, most heads): it holds every weight any
        architecture of the space has (``nas.supernet``).  Only its own blocks are chosen and made."""
        return self._extreme(max)

    def _extreme(self, pick: Any) -> Arch:
        """The architecture with ``pick`` (min or max) of every choice: the parameters of its own blocks
        only, not of every block slot."""
        params = {"stem_width": pick(self.stem_widths), "head_hidden": pick(self.head_hidden)}
        for i, st in enumerate(self.stages):
            params[f"s{i}_depth"], params[f"s{i}_width"] = pick(st.depth), pick(st.width)
            for name in STAGE_KINDS[st.kind]:
                best = pick(st.options[name])
                params.update((f"s{i}_b{j}_{name}", best) for j in range(params[f"s{i}_depth"]))
        return self.decode(params)

    def random(self, rng: np.random.Generator | int | None = None) -> Arch:
        """A uniformly sampled architecture.

        Args:
            rng: A ``numpy.random.Generator``, or a seed for one (None: unseeded).

        Returns:
            The ``Arch`` of :meth:`sample_params`; the same seed gives the same Arch.
        """
        return self.decode(self.sample_params(rng))

    def decode(self, params: dict[str, Any]) -> Arch:
        """Decode a parameter mapping (as an Optuna trial holds it) into an architecture.

        Args:
            params: ``{name: choice}``; the slots of blocks beyond a stage's depth may be absent.

        Returns:
            The ``Arch``.

        Raises:
            SpaceError: A parameter is unknown, missing, or not one of its choices (named).
        """
        choices = self._choices
        unknown = sorted(set(params) - set(choices))
        if unknown:
            raise SpaceError(f"{self.source}: unknown parameter {unknown[0]!r} for space {self.name!r}")

        def get(name: str) -> Any:
            if name not in params:
                raise SpaceError(f"{self.source}: missing parameter {name!r}")
            v = params[name]
            for c in choices[name]:  # return the canonical choice (2 and 2.0 match; True and 1 do not)
                if c == v and isinstance(c, bool) == isinstance(v, bool):
                    return c
            raise SpaceError(f"{self.source}: parameter {name}={v!r} is not one of {list(choices[name])}")

        stem_w = get("stem_width")
        stem = ConvBlock(stem_w, self.stem_kernel, self.stem_stride, self.stem_act)
        blocks: list[Block] = []
        in_ch = stem_w
        for i, st in enumerate(self.stages):
            depth, width = get(f"s{i}_depth"), get(f"s{i}_width")
            for j in range(depth):
                opts = {n: get(f"s{i}_b{j}_{n}") for n in STAGE_KINDS[st.kind]}
                blocks.append(self._make_block(st, in_ch, width, st.stride if j == 0 else 1, opts))
                in_ch = width
        hidden = get("head_hidden")
        head = Head(self.num_classes, hidden, self.head_style, self.head_act, self.head_bias)
        return Arch(self.in_chans, self.resolution, stem, tuple(blocks), head, name=self.name)

    def _se(self, channels: int) -> SE:
        return SE(make_divisible(channels * self.se_ratio, self.channel_multiple), self.se_gate, self.se_act)

    def _make_block(self, st: StageSpec, in_ch: int, width: int, stride: int, o: dict[str, Any]) -> Block:
        if st.kind == "conv":
            return ConvBlock(width, o["kernel"], stride, st.act)
        if st.kind == "ds":
            b = DSConvBlock(width, o["kernel"], stride, st.act, self._se(in_ch) if o["se"] else None, pw_act=st.pw_act)
            # noskip only where the shapes allow a residual, as from_timm marks PP-LCNet's blocks
            return dataclasses.replace(b, noskip=True) if st.noskip and b.has_skip(in_ch) else b
        if st.kind in ("ir", "fused"):
            mid = make_divisible(in_ch * o["expansion"], self.channel_multiple)
            cls = MBConvBlock if st.kind == "ir" else FusedMBConvBlock
            return cls(width, mid, o["kernel"], stride, st.act, self._se(mid) if o["se"] else None)
        return AttentionBlock(width, o["heads"], float(o["mlp_ratio"]), stride, st.act, st.proj_act)

    # ------------------------------------------------------------------------------------
    # enumeration

    def stage_resolutions(self, resolution: int | None = None) -> list[int]:
        """The input height (= width) of each stage.

        Args:
            resolution: The network's input resolution; None for the space's own.

        Returns:
            One size per stage, in order.
        """
        h = self.resolution if resolution is None else resolution
        h = (h - 1) // 2 + 1 if self.stem_stride == 2 else h
        out = []
        for st in self.stages:
            out.append(h)
            h = (h - 1) // 2 + 1 if st.stride == 2 else h
        return out

    def unique_blocks(self, resolution: int | None = None, *, in_chans: Sequence[int] = (),
                      num_classes: Sequence[int] = ()) -> list[BlockKey]:
        """Every distinct block at its input shape that the space can produce, stem and head included.

        Args:
            resolution: The input resolution; None for the space's own.
            in_chans: Input channel counts whose stems to add beside the space's own (a search
                deploys the network with its dataset's: 1-channel Fashion-MNIST, ...).
            num_classes: Class counts whose heads to add beside the space's own.

        Returns:
            The ``BlockKey`` of each, once: what a latency table of the space measures.
        """
        r = self.resolution if resolution is None else resolution
        keys: dict[BlockKey, None] = {}
        for c in dict.fromkeys((self.in_chans, *in_chans)):
            for w in self.stem_widths:
                keys[BlockKey(ConvBlock(w, self.stem_kernel, self.stem_stride, self.stem_act), c, r, r)] = None
        in_chs: Sequence[int] = self.stem_widths
        hs = self.stage_resolutions(r)
        for st, h in zip(self.stages, hs):
            h2 = (h - 1) // 2 + 1 if st.stride == 2 else h
            combos = st.combos()
            for w in st.width:
                for c in in_chs:
                    for o in combos:
                        keys[BlockKey(self._make_block(st, c, w, st.stride, o), c, h, h)] = None
                if st.max_depth > 1:
                    for o in combos:
                        keys[BlockKey(self._make_block(st, w, w, 1, o), w, h2, h2)] = None
            in_chs = st.width
        hf = hs[-1] if self.stages[-1].stride == 1 else (hs[-1] - 1) // 2 + 1
        for nc in dict.fromkeys((self.num_classes, *num_classes)):
            for c in in_chs:
                for hid in self.head_hidden:
                    head = Head(nc, hid, self.head_style, self.head_act, self.head_bias)
                    keys[BlockKey(head, c, hf, hf)] = None
        return list(keys)

    def size(self) -> int:
        """The number of distinct architectures the space holds."""
        n = len(self.stem_widths) * len(self.head_hidden)
        for st in self.stages:
            c = len(st.combos())
            n *= len(st.width) * sum(c**d for d in st.depth)
        return n

    def log10_size(self) -> float:
        """``log10`` of :meth:`size`."""
        return math.log10(self.size())

    def __repr__(self) -> str:
        return f"SearchSpace({self.name!r}, stages={len(self.stages)}, size=10^{self.log10_size():.1f})"
