"""Reading a search space's YAML mapping into validated parts (import them from ``nas.space``).

``parse_space(config, source=...)`` checks every key and value of the format in ``nas.space``'s
module docs and returns the ``SpaceParts`` a ``SearchSpace`` is made of.  A malformed space raises
``SpaceError`` naming the file, the field and the bad value.

A space is bounded (docs/spaces.md, "Limits"): at most ``MAX_STAGES`` stages, ``MAX_CHOICES`` values
in one choice list, ``MAX_COMBOS`` option combinations for one block, a depth of ``MAX_DEPTH``
blocks in one stage and ``MAX_BLOCKS`` blocks in its deepest architecture.  Each bound is checked before the values it bounds are read one by one, so a
space far beyond them is refused in time linear in its stages.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas._checks import MAX_RESOLUTION
from nas.arch import ACTIVATIONS, GATES, HEAD_STYLES

__all__ = ["LIMITS_DOC", "MAX_BLOCKS", "MAX_CHOICES", "MAX_COMBOS", "MAX_DEPTH", "MAX_STAGES", "STAGE_KINDS", "SpaceError",
           "SpaceParts", "StageSpec", "parse_space"]

MAX_STAGES = 32  # stages in a space
MAX_CHOICES = 64  # values in one choice list (depth, width, kernel, ...)
MAX_DEPTH = 64  # blocks in one stage (its largest depth choice)
MAX_BLOCKS = 256  # blocks in a space's deepest architecture (the sum of its stages' largest depths)
MAX_COMBOS = 1024  # one block's option combinations in a stage (the product of its option lists' lengths)
LIMITS_DOC = "the limits are in docs/spaces.md, \"Limits\""

STAGE_KINDS: dict[str, tuple[str, ...]] = {
    # kind -> per-block option keys
    "conv": ("kernel",),
    "ds": ("kernel", "se"),
    "ir": ("kernel", "expansion", "se"),
    "fused": ("kernel", "expansion", "se"),
    "attn": ("heads", "mlp_ratio"),
}
_STAGE_COMMON = ("kind", "depth", "width", "stride", "act")
_STAGE_EXTRA = {"attn": ("proj_act",), "ds": ("pw_act", "noskip")}  # fixed per stage, not choices
_TOP_KEYS = (
    "name", "description", "input", "num_classes", "channel_multiple", "se", "stem", "stages", "head",
)


class SpaceError(ValueError):
    """A malformed search space: the message names the file, the field and the bad value."""


@dataclass(frozen=True)
class StageSpec:
    kind: str
    depth: tuple[int, ...]
    width: tuple[int, ...]
    stride: int
    act: str
    options: dict[str, tuple[Any, ...]] = field(hash=False)
    proj_act: str = "swish"
    pw_act: bool = False  # ds: an activation after the pointwise conv too (PP-LCNet, MobileNetV1)
    noskip: bool = False  # ds: no residual even where the shapes allow one

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    def combos(self) -> list[dict[str, Any]]:
        names = STAGE_KINDS[self.kind]
        return [dict(zip(names, vals)) for vals in itertools.product(*(self.options[n] for n in names))]


@dataclass(frozen=True)
class SpaceParts:
    """A space's validated fields (a ``SearchSpace`` takes them as its attributes)."""

    name: str
    description: str
    channel_multiple: int
    in_chans: int
    resolution: int
    num_classes: int
    se_ratio: float
    se_gate: str
    se_act: str | None
    stem_widths: tuple[int, ...]
    stem_kernel: int
    stem_stride: int
    stem_act: str
    stages: list[StageSpec]
    head_style: str
    head_hidden: tuple[int, ...]
    head_act: str
    head_bias: bool
    final_hw: int  # the feature map's side after the last stage


def parse_space(cfg: Any, *, source: str) -> SpaceParts:
    """Validate a space's mapping (as loaded from its YAML file ``source``) and return its parts.

    The sections are read in the file's order (top level, channel_multiple, input, num_classes,
    se, stem, stages, head), so the first malformed one is the one reported."""
    r = _Reader(source)
    if not isinstance(cfg, dict):
        raise r.err("top level", f"expected a mapping, got {type(cfg).__name__}")
    r.unknown(cfg, _TOP_KEYS, "top level")
    name = str(cfg.get("name") or Path(source).stem)
    description = str(cfg.get("description", ""))

    cm = cfg.get("channel_multiple", 8)
    if cm not in (8, 16) or isinstance(cm, bool):
        raise r.err("channel_multiple", f"value {_short(cm)} must be 8 or 16")
    in_chans, resolution = r.input(cfg.get("input", {}))
    nc = cfg.get("num_classes", 1000)
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise r.err("num_classes", f"value {_short(nc)} must be a positive integer")
    se_ratio, se_gate, se_act = r.se(cfg.get("se", {}) or {})

    stem = cfg.get("stem")
    if not isinstance(stem, dict):
        raise r.err("stem", "missing or not a mapping")
    r.unknown(stem, ("width", "kernel", "stride", "act"), "stem")
    stem_widths = r.widths(stem, "stem", cm)
    stem_kernel = r.kernels({"kernel": stem.get("kernel", 3)}, "stem")[0]
    stem_stride = r.stride(stem, "stem")
    stem_act = r.act(stem.get("act", "relu"), "stem.act")

    stages = cfg.get("stages")
    if not isinstance(stages, list) or not stages:
        raise r.err("stages", "missing, empty or not a list")
    if len(stages) > MAX_STAGES:
        raise r.err("stages", f"{len(stages)} stages, more than the limit of {MAX_STAGES}; {LIMITS_DOC}")
    specs = [r.stage(s, f"stages[{i}]", cm) for i, s in enumerate(stages)]
    blocks = sum(st.max_depth for st in specs)
    if blocks > MAX_BLOCKS:
        raise r.err("stages", f"the deepest architecture has {blocks} blocks, more than the limit of {MAX_BLOCKS}; "
                              f"lower some stage's largest depth ({LIMITS_DOC})")
    head_style, head_hidden, head_act, head_bias = r.head(cfg.get("head", {}) or {})

    # every sampled architecture must keep a non-empty feature map
    h = resolution
    for s in [stem_stride, *(st.stride for st in specs)]:
        h = (h - 1) // s + 1 if s == 2 else h
    return SpaceParts(name, description, cm, in_chans, resolution, nc, se_ratio, se_gate, se_act, stem_widths,
                      stem_kernel, stem_stride, stem_act, specs, head_style, head_hidden, head_act, head_bias, h)


_SHOWN = 60  # characters of a value an error quotes (a whole file read as one key must not fill the screen)


def _short(v: Any) -> str:
    """``repr(v)``, cut to ``_SHOWN`` characters with how long it was: how an error quotes a value."""
    r = repr(v)
    return r if len(r) <= _SHOWN else f"{r[:_SHOWN]}... ({len(r)} characters)"


class _Reader:
    """The checks of one file's values; each failure is a ``SpaceError`` naming the file and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def err(self, where: str, msg: str) -> SpaceError:
        return SpaceError(f"{self.source}: {where}: {msg}")

    def choices(self, d: dict, key: str, where: str, *, required: bool = True) -> tuple:
        if key not in d:
            if required:
                raise self.err(where, f"missing required key {_short(key)}")
            return ()
        v = d[key]
        if not isinstance(v, (list, tuple)):
            v = [v]
        if len(v) == 0:
            raise self.err(f"{where}.{key}", "empty choice list; give at least one value")
        if len(v) > MAX_CHOICES:
            raise self.err(f"{where}.{key}", f"{len(v)} choices, more than the limit of {MAX_CHOICES}; {LIMITS_DOC}")
        if len(set(map(repr, v))) != len(v):
            raise self.err(f"{where}.{key}", f"duplicate choices in {_short(list(v))}")
        return tuple(v)

    def int_choices(self, d: dict, key: str, where: str, *, lo: int = 1) -> tuple[int, ...]:
        vals = self.choices(d, key, where)
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise self.err(f"{where}.{key}", f"value {_short(v)} must be an integer >= {lo}")
        return vals

    def numbers(self, d: dict, key: str, where: str) -> tuple:
        vals = self.choices(d, key, where)
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise self.err(f"{where}.{key}", f"value {_short(v)} must be a positive number")
        return vals

    def unknown(self, d: dict, allowed: Iterable[str], where: str) -> None:
        unknown = sorted(set(d) - set(allowed))
        if unknown:
            raise self.err(where, f"unknown key {_short(unknown[0])}; allowed keys: {', '.join(sorted(allowed))}")

    def act(self, value: Any, where: str) -> str:
        if value not in ACTIVATIONS:
            raise self.err(where, f"unknown activation {_short(value)}; allowed: {', '.join(ACTIVATIONS)}")
        return value

    def widths(self, d: dict, where: str, multiple: int) -> tuple[int, ...]:
        vals = self.int_choices(d, "width", where)
        for w in vals:
            if w % multiple:
                raise self.err(f"{where}.width", f"width {w} is not a multiple of channel_multiple={multiple}")
        return vals

    def kernels(self, d: dict, where: str, key: str = "kernel") -> tuple[int, ...]:
        vals = self.choices(d, key, where)
        for k in vals:
            if isinstance(k, bool) or not isinstance(k, int) or k <= 0 or k % 2 == 0:
                raise self.err(f"{where}.{key}", f"kernel {_short(k)} must be a positive odd integer")
        return vals

    def stride(self, d: dict, where: str) -> int:
        s = d.get("stride", 1)
        if s not in (1, 2) or isinstance(s, bool):
            raise self.err(f"{where}.stride", f"stride {_short(s)} must be 1 or 2")
        return s

    def input(self, inp: Any) -> tuple[int, int]:
        if not isinstance(inp, dict):
            raise self.err("input", f"expected a mapping, got {_short(inp)}")
        self.unknown(inp, ("channels", "resolution"), "input")
        in_chans, resolution = inp.get("channels", 3), inp.get("resolution", 224)
        for k, v in (("channels", in_chans), ("resolution", resolution)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise self.err(f"input.{k}", f"value {_short(v)} must be a positive integer")
        if resolution > MAX_RESOLUTION:
            raise self.err("input.resolution", f"{resolution} px is more than the limit of {MAX_RESOLUTION} px on a "
                                               f"side; give {MAX_RESOLUTION} or less ({LIMITS_DOC})")
        return in_chans, resolution

    def se(self, se: Any) -> tuple[float, str, str | None]:
        if not isinstance(se, dict):
            raise self.err("se", f"expected a mapping, got {_short(se)}")
        self.unknown(se, ("ratio", "gate", "act"), "se")
        ratio = se.get("ratio", 0.25)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise self.err("se.ratio", f"value {_short(ratio)} must be in (0, 1]")
        gate = se.get("gate", "sigmoid")
        if gate not in GATES:
            raise self.err("se.gate", f"unknown gate {_short(gate)}; allowed: {', '.join(GATES)}")
        return ratio, gate, None if se.get("act") is None else self.act(se.get("act"), "se.act")

    def head(self, head: Any) -> tuple[str, tuple[int, ...], str, bool]:
        if not isinstance(head, dict):
            raise self.err("head", f"expected a mapping, got {_short(head)}")
        self.unknown(head, ("style", "hidden", "act", "bias"), "head")
        style = head.get("style", "pool")
        if style not in HEAD_STYLES:
            raise self.err("head.style", f"unknown style {_short(style)}; allowed: {', '.join(HEAD_STYLES)}")
        if style == "pool":
            if head.get("hidden", 0) not in (0, [0], None):
                raise self.err("head.hidden", "style 'pool' has no hidden layer; drop 'hidden'")
            hidden: tuple[int, ...] = (0,)
        else:
            hidden = self.int_choices(head, "hidden", "head")
        return style, hidden, self.act(head.get("act", "relu"), "head.act"), bool(head.get("bias", True))

    def stage(self, st: Any, where: str, multiple: int) -> StageSpec:
        if not isinstance(st, dict):
            raise self.err(where, f"expected a mapping, got {_short(st)}")
        kind = st.get("kind")
        if kind not in STAGE_KINDS:
            raise self.err(f"{where}.kind", f"unknown block kind {_short(kind)}; allowed: {', '.join(STAGE_KINDS)}")
        opts = STAGE_KINDS[kind]
        self.unknown(st, _STAGE_COMMON + opts + _STAGE_EXTRA.get(kind, ()), where)
        depth = self.int_choices(st, "depth", where)
        if max(depth) > MAX_DEPTH:
            raise self.err(f"{where}.depth", f"depth {max(depth)} is more than the limit of {MAX_DEPTH} blocks "
                                             f"in a stage; {LIMITS_DOC}")
        width = self.widths(st, where, multiple)
        stride = self.stride(st, where)
        act = self.act(st.get("act", "gelu" if kind == "attn" else "relu"), f"{where}.act")
        options: dict[str, tuple[Any, ...]] = {}
        if "kernel" in opts:
            options["kernel"] = self.kernels(st, where)
        if "expansion" in opts:
            options["expansion"] = self.numbers(st, "expansion", where)
        if "se" in opts:
            vals = self.choices(st, "se", where) if "se" in st else (False,)
            options["se"] = tuple(self.boolean(v, f"{where}.se") for v in vals)
        if kind == "attn":
            options["heads"] = self.heads(st, where, width)
            options["mlp_ratio"] = self.numbers(st, "mlp_ratio", where)
        combos = math.prod(len(v) for v in options.values())
        if combos > MAX_COMBOS:
            raise self.err(where, f"{' x '.join(str(len(v)) for v in options.values())} = {combos} combinations of "
                                  f"{', '.join(options)} for a block, more than the limit of {MAX_COMBOS}; {LIMITS_DOC}")
        proj_act = self.act(st.get("proj_act", "swish"), f"{where}.proj_act") if kind == "attn" else "swish"
        flags = {k: self.boolean(st.get(k, False), f"{where}.{k}") for k in ("pw_act", "noskip") if kind == "ds"}
        return StageSpec(kind, depth, width, stride, act, options, proj_act, **flags)

    def boolean(self, v: Any, where: str) -> bool:
        if not isinstance(v, bool):
            raise self.err(where, f"value {_short(v)} must be true or false")
        return v

    def heads(self, st: dict, where: str, width: tuple[int, ...]) -> tuple[int, ...]:
        heads = self.int_choices(st, "heads", where)
        for w in width:
            for hd in heads:
                if w % hd:
                    raise self.err(f"{where}.heads", f"{hd} heads do not divide the embed dim (width) {w}")
                if (w // hd) % 8:
                    raise self.err(f"{where}.heads",
                                   f"{hd} heads on embed dim {w} give head dim {w // hd}, not a multiple of 8")
        return heads
