"""Search spaces: load + validate a YAML file, sample architectures, enumerate unique blocks.

A space is a YAML file in ``search_spaces/`` (select it with ``search_space=<name>``) or any
path to a user's own YAML.  Format::

    name: mbv3                      # optional, defaults to the file stem
    description: ...                # optional
    input: {channels: 3, resolution: 224}
    num_classes: 1000
    channel_multiple: 8             # every width must be a multiple of it (8 or 16)
    se: {ratio: 0.25, gate: hard_sigmoid, act: relu}   # optional; how SE blocks are made
    stem: {width: [16], kernel: 3, stride: 2, act: hard_swish}
    stages:                         # in order; each is one kind of block repeated `depth` times
      - {kind: ds, depth: [1], width: [16], kernel: [3], se: [false], stride: 1, act: relu}
      - {kind: ir, depth: [2, 3], width: [24, 32], kernel: [3, 5, 7], expansion: [3, 4, 6],
         se: [false, true], stride: 2, act: relu}
      - {kind: attn, depth: [1, 2], width: [96, 128], heads: [2, 4], mlp_ratio: [2, 4],
         stride: 1, act: gelu}
    head: {style: pool_conv, hidden: [1024], act: hard_swish}

Choices are lists; ``depth`` and ``width`` are chosen per stage, the block options (kernel,
expansion, se, heads, mlp_ratio) per block.  Keys allowed per stage kind:

    conv: kernel            ds: kernel, se            ir / fused: kernel, expansion, se
    attn: heads, mlp_ratio (and proj_act)

Expanded channels are ``make_divisible(in * expansion, channel_multiple)`` and SE channels
``make_divisible(channels * se.ratio, channel_multiple)``, so every channel count stays a
multiple of ``channel_multiple``.

The parameter encoding is fixed-length: every block slot up to the stage's maximum depth is
always sampled (unused slots are ignored when decoding), so NSGA-II and multivariate TPE see
the same parameters in every trial.  Names: ``stem_width``, ``s{i}_depth``, ``s{i}_width``,
``s{i}_b{j}_{option}``, ``head_hidden``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nas.arch import (
    ACTIVATIONS,
    GATES,
    HEAD_STYLES,
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
)
from nas.resources import spaces_dir

__all__ = [
    "SPACES_DIR",
    "SearchSpace",
    "SpaceError",
    "StageSpec",
    "list_calibration_spaces",
    "list_spaces",
    "load_space",
    "make_divisible",
]

SPACES_DIR = spaces_dir()

STAGE_KINDS: dict[str, tuple[str, ...]] = {
    # kind -> per-block option keys
    "conv": ("kernel",),
    "ds": ("kernel", "se"),
    "ir": ("kernel", "expansion", "se"),
    "fused": ("kernel", "expansion", "se"),
    "attn": ("heads", "mlp_ratio"),
}
_STAGE_COMMON = ("kind", "depth", "width", "stride", "act")
_STAGE_EXTRA = {"attn": ("proj_act",)}
_TOP_KEYS = (
    "name", "description", "input", "num_classes", "channel_multiple", "se", "stem", "stages", "head",
)


class SpaceError(ValueError):
    """A malformed search space: the message names the file, the field and the bad value."""


def make_divisible(v: float, divisor: int) -> int:
    """Nearest multiple of ``divisor`` (never below it, never more than 10% below ``v``)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


@dataclass(frozen=True)
class StageSpec:
    kind: str
    depth: tuple[int, ...]
    width: tuple[int, ...]
    stride: int
    act: str
    options: dict[str, tuple[Any, ...]] = field(hash=False)
    proj_act: str = "swish"

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    def combos(self) -> list[dict[str, Any]]:
        names = STAGE_KINDS[self.kind]
        return [dict(zip(names, vals)) for vals in itertools.product(*(self.options[n] for n in names))]


class SearchSpace:
    """A validated search space.  Build with ``load_space(name_or_path)``."""

    def __init__(self, config: dict[str, Any], *, source: str = "<dict>") -> None:
        import copy

        self.source = source
        self._parse(config)
        self.config: dict[str, Any] = copy.deepcopy(config)  # as loaded: rebuilds the space (SearchSpace(config))

    def digest(self) -> str:
        """Stable identity of the space's definition (sha1 of its canonical JSON; the source path is not part of it)."""
        from nas.arch import _digest

        return _digest(self.config)

    # ------------------------------------------------------------------------------------
    # loading and validation

    def _err(self, where: str, msg: str) -> SpaceError:
        return SpaceError(f"{self.source}: {where}: {msg}")

    def _choices(self, d: dict, key: str, where: str, *, required: bool = True) -> tuple:
        if key not in d:
            if required:
                raise self._err(where, f"missing required key {key!r}")
            return ()
        v = d[key]
        if not isinstance(v, (list, tuple)):
            v = [v]
        if len(v) == 0:
            raise self._err(f"{where}.{key}", "empty choice list; give at least one value")
        if len(set(map(repr, v))) != len(v):
            raise self._err(f"{where}.{key}", f"duplicate choices in {list(v)}")
        return tuple(v)

    def _int_choices(self, d: dict, key: str, where: str, *, lo: int = 1) -> tuple[int, ...]:
        vals = self._choices(d, key, where)
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise self._err(f"{where}.{key}", f"value {v!r} must be an integer >= {lo}")
        return vals

    def _unknown(self, d: dict, allowed: Iterable[str], where: str) -> None:
        unknown = sorted(set(d) - set(allowed))
        if unknown:
            raise self._err(where, f"unknown key {unknown[0]!r}; allowed keys: {', '.join(sorted(allowed))}")

    def _act(self, value: Any, where: str) -> str:
        if value not in ACTIVATIONS:
            raise self._err(where, f"unknown activation {value!r}; allowed: {', '.join(ACTIVATIONS)}")
        return value

    def _widths(self, d: dict, where: str) -> tuple[int, ...]:
        vals = self._int_choices(d, "width", where)
        for w in vals:
            if w % self.channel_multiple:
                raise self._err(
                    f"{where}.width",
                    f"width {w} is not a multiple of channel_multiple={self.channel_multiple}",
                )
        return vals

    def _kernels(self, d: dict, where: str, key: str = "kernel") -> tuple[int, ...]:
        vals = self._choices(d, key, where)
        for k in vals:
            if isinstance(k, bool) or not isinstance(k, int) or k <= 0 or k % 2 == 0:
                raise self._err(f"{where}.{key}", f"kernel {k!r} must be a positive odd integer")
        return vals

    def _stride(self, d: dict, where: str) -> int:
        s = d.get("stride", 1)
        if s not in (1, 2) or isinstance(s, bool):
            raise self._err(f"{where}.stride", f"stride {s!r} must be 1 or 2")
        return s

    def _parse(self, cfg: dict[str, Any]) -> None:
        if not isinstance(cfg, dict):
            raise self._err("top level", f"expected a mapping, got {type(cfg).__name__}")
        self._unknown(cfg, _TOP_KEYS, "top level")
        self.name = str(cfg.get("name") or Path(self.source).stem)
        self.description = str(cfg.get("description", ""))

        cm = cfg.get("channel_multiple", 8)
        if cm not in (8, 16) or isinstance(cm, bool):
            raise self._err("channel_multiple", f"value {cm!r} must be 8 or 16")
        self.channel_multiple: int = cm

        inp = cfg.get("input", {})
        if not isinstance(inp, dict):
            raise self._err("input", f"expected a mapping, got {inp!r}")
        self._unknown(inp, ("channels", "resolution"), "input")
        self.in_chans = inp.get("channels", 3)
        self.resolution = inp.get("resolution", 224)
        for k, v in (("channels", self.in_chans), ("resolution", self.resolution)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise self._err(f"input.{k}", f"value {v!r} must be a positive integer")
        nc = cfg.get("num_classes", 1000)
        if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
            raise self._err("num_classes", f"value {nc!r} must be a positive integer")
        self.num_classes: int = nc

        se = cfg.get("se", {}) or {}
        if not isinstance(se, dict):
            raise self._err("se", f"expected a mapping, got {se!r}")
        self._unknown(se, ("ratio", "gate", "act"), "se")
        self.se_ratio = se.get("ratio", 0.25)
        if isinstance(self.se_ratio, bool) or not isinstance(self.se_ratio, (int, float)) or not 0 < self.se_ratio <= 1:
            raise self._err("se.ratio", f"value {self.se_ratio!r} must be in (0, 1]")
        self.se_gate = se.get("gate", "sigmoid")
        if self.se_gate not in GATES:
            raise self._err("se.gate", f"unknown gate {self.se_gate!r}; allowed: {', '.join(GATES)}")
        self.se_act = None if se.get("act") is None else self._act(se.get("act"), "se.act")

        stem = cfg.get("stem")
        if not isinstance(stem, dict):
            raise self._err("stem", "missing or not a mapping")
        self._unknown(stem, ("width", "kernel", "stride", "act"), "stem")
        self.stem_widths = self._widths(stem, "stem")
        self.stem_kernel = self._kernels({"kernel": stem.get("kernel", 3)}, "stem")[0]
        self.stem_stride = self._stride(stem, "stem")
        self.stem_act = self._act(stem.get("act", "relu"), "stem.act")

        stages = cfg.get("stages")
        if not isinstance(stages, list) or not stages:
            raise self._err("stages", "missing, empty or not a list")
        self.stages: list[StageSpec] = [self._parse_stage(s, f"stages[{i}]") for i, s in enumerate(stages)]

        head = cfg.get("head", {}) or {}
        if not isinstance(head, dict):
            raise self._err("head", f"expected a mapping, got {head!r}")
        self._unknown(head, ("style", "hidden", "act", "bias"), "head")
        self.head_style = head.get("style", "pool")
        if self.head_style not in HEAD_STYLES:
            raise self._err("head.style", f"unknown style {self.head_style!r}; allowed: {', '.join(HEAD_STYLES)}")
        if self.head_style == "pool":
            if head.get("hidden", 0) not in (0, [0], None):
                raise self._err("head.hidden", "style 'pool' has no hidden layer; drop 'hidden'")
            self.head_hidden: tuple[int, ...] = (0,)
        else:
            self.head_hidden = self._int_choices(head, "hidden", "head")
        self.head_act = self._act(head.get("act", "relu"), "head.act")
        self.head_bias = bool(head.get("bias", True))

        # every sampled architecture must keep a non-empty feature map
        h = self.resolution
        for s in [self.stem_stride, *(st.stride for st in self.stages)]:
            h = (h - 1) // s + 1 if s == 2 else h
        self._final_hw = h

    def _parse_stage(self, st: Any, where: str) -> StageSpec:
        if not isinstance(st, dict):
            raise self._err(where, f"expected a mapping, got {st!r}")
        kind = st.get("kind")
        if kind not in STAGE_KINDS:
            raise self._err(f"{where}.kind", f"unknown block kind {kind!r}; allowed: {', '.join(STAGE_KINDS)}")
        opts = STAGE_KINDS[kind]
        self._unknown(st, _STAGE_COMMON + opts + _STAGE_EXTRA.get(kind, ()), where)
        depth = self._int_choices(st, "depth", where)
        width = self._widths(st, where)
        stride = self._stride(st, where)
        act = self._act(st.get("act", "gelu" if kind == "attn" else "relu"), f"{where}.act")
        options: dict[str, tuple[Any, ...]] = {}
        if "kernel" in opts:
            options["kernel"] = self._kernels(st, where)
        if "expansion" in opts:
            vals = self._choices(st, "expansion", where)
            for e in vals:
                if isinstance(e, bool) or not isinstance(e, (int, float)) or e <= 0:
                    raise self._err(f"{where}.expansion", f"value {e!r} must be a positive number")
            options["expansion"] = vals
        if "se" in opts:
            vals = self._choices(st, "se", where) if "se" in st else (False,)
            for v in vals:
                if not isinstance(v, bool):
                    raise self._err(f"{where}.se", f"value {v!r} must be true or false")
            options["se"] = vals
        if kind == "attn":
            heads = self._int_choices(st, "heads", where)
            for w in width:
                for hd in heads:
                    if w % hd:
                        raise self._err(f"{where}.heads", f"{hd} heads do not divide the embed dim (width) {w}")
                    if (w // hd) % 8:
                        raise self._err(
                            f"{where}.heads",
                            f"{hd} heads on embed dim {w} give head dim {w // hd}, not a multiple of 8",
                        )
            options["heads"] = heads
            vals = self._choices(st, "mlp_ratio", where)
            for r in vals:
                if isinstance(r, bool) or not isinstance(r, (int, float)) or r <= 0:
                    raise self._err(f"{where}.mlp_ratio", f"value {r!r} must be a positive number")
            options["mlp_ratio"] = vals
        proj_act = self._act(st.get("proj_act", "swish"), f"{where}.proj_act") if kind == "attn" else "swish"
        return StageSpec(kind, depth, width, stride, act, options, proj_act)

    # ------------------------------------------------------------------------------------
    # the parameter encoding

    def param_choices(self) -> dict[str, tuple[Any, ...]]:
        """Every parameter name and its choices, in sampling order (fixed length)."""
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
        """Sample from an Optuna trial (``suggest_categorical`` on every parameter)."""
        params = {name: trial.suggest_categorical(name, list(ch)) for name, ch in self.param_choices().items()}
        return self.decode(params)

    def sample_params(self, rng: np.random.Generator | int | None = None) -> dict[str, Any]:
        rng = np.random.default_rng(rng)
        return {name: ch[int(rng.integers(len(ch)))] for name, ch in self.param_choices().items()}

    def sample_indices(self, n: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """``n`` uniform parameter vectors as choice indices (n x len(param_choices())), vectorised."""
        rng = np.random.default_rng(rng)
        sizes = [len(ch) for ch in self.param_choices().values()]
        return np.stack([rng.integers(s, size=n) for s in sizes], axis=1)

    def decode_indices(self, idx: Sequence[int]) -> Arch:
        """One row of ``sample_indices`` -> Arch."""
        ch = self.param_choices()
        return self.decode({name: c[int(i)] for (name, c), i in zip(ch.items(), idx)})

    def smallest(self) -> Arch:
        """The architecture with the smallest choice of every parameter (fewest blocks, narrowest,
        smallest kernels and expansions, no squeeze-excite, fewest heads): a lower bound on latency and
        memory in all but contrived spaces."""
        return self.decode({name: min(ch) for name, ch in self.param_choices().items()})

    def largest(self) -> Arch:
        """The architecture with the largest choice of every parameter (deepest, widest, largest kernels
        and expansions, squeeze-excite wherever it is a choice, most heads): it holds every weight any
        architecture of the space has (``nas.supernet``)."""
        return self.decode({name: max(ch) for name, ch in self.param_choices().items()})

    def random(self, rng: np.random.Generator | int | None = None) -> Arch:
        """A uniformly sampled parameter vector decoded to an Arch (seed or Generator)."""
        return self.decode(self.sample_params(rng))

    def decode(self, params: dict[str, Any]) -> Arch:
        """Params dict (as an Optuna trial holds them) -> Arch.  Unused block slots may be absent."""
        choices = self.param_choices()
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
            return DSConvBlock(width, o["kernel"], stride, st.act, self._se(in_ch) if o["se"] else None)
        if st.kind in ("ir", "fused"):
            mid = make_divisible(in_ch * o["expansion"], self.channel_multiple)
            cls = MBConvBlock if st.kind == "ir" else FusedMBConvBlock
            return cls(width, mid, o["kernel"], stride, st.act, self._se(mid) if o["se"] else None)
        return AttentionBlock(width, o["heads"], float(o["mlp_ratio"]), stride, st.act, st.proj_act)

    # ------------------------------------------------------------------------------------
    # enumeration

    def stage_resolutions(self, resolution: int | None = None) -> list[int]:
        """Input height/width of each stage at ``resolution``."""
        h = self.resolution if resolution is None else resolution
        h = (h - 1) // 2 + 1 if self.stem_stride == 2 else h
        out = []
        for st in self.stages:
            out.append(h)
            h = (h - 1) // 2 + 1 if st.stride == 2 else h
        return out

    def unique_blocks(self, resolution: int | None = None, *, in_chans: Sequence[int] = (),
                      num_classes: Sequence[int] = ()) -> list[BlockKey]:
        """Every distinct (block, input shape) the space can produce, stem and head included.

        ``in_chans`` / ``num_classes`` add stems / heads for other input channels and class
        counts (a search deploys the network with its dataset's: 1-channel Fashion-MNIST, 10
        classes...), beside the space's own."""
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
        return math.log10(self.size())

    def __repr__(self) -> str:
        return f"SearchSpace({self.name!r}, stages={len(self.stages)}, size=10^{self.log10_size():.1f})"


def list_spaces() -> list[str]:
    """Names of the spaces shipped in search_spaces/."""
    return sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))


def list_calibration_spaces() -> list[str]:
    """Names (``calibration/<name>``, as ``load_space`` takes them) of the calibration-only spaces in
    search_spaces/calibration/: ``nas.profile`` measures their blocks and seeded networks for the
    predictor's calibration, so that it also covers networks unlike the search spaces' (deep ReLU
    networks, depthwise-separable-only ones).  Nothing searches them and nothing validates on them."""
    return sorted(f"calibration/{p.stem}" for p in (SPACES_DIR / "calibration").glob("*.yaml"))


def load_space(name_or_path: str | Path) -> SearchSpace:
    """Load a shipped space by name (``mbv3``) or any YAML file by path."""
    from omegaconf import OmegaConf

    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml") and not p.exists():
        p = SPACES_DIR / f"{name_or_path}.yaml"
        if not p.is_file():
            raise SpaceError(
                f"unknown search space {str(name_or_path)!r}: not a file, and not one of the shipped "
                f"spaces ({', '.join(list_spaces())}) in {SPACES_DIR}"
            )
    if not p.is_file():
        raise SpaceError(f"search space file not found: {p}")
    try:
        cfg = OmegaConf.to_container(OmegaConf.load(p), resolve=True)
    except Exception as e:  # yaml or interpolation errors
        raise SpaceError(f"{p}: cannot parse YAML: {e}") from None
    return SearchSpace(cfg, source=str(p))  # type: ignore[arg-type]


def summarize(space: SearchSpace, *, samples: int = 200, seed: int = 0) -> dict[str, Any]:
    """Size, unique block count and params / MACs statistics over a seeded sample."""
    from nas.cost import arch_cost

    rng = np.random.default_rng(seed)
    costs = [arch_cost(space.random(rng)) for _ in range(samples)]
    params = np.array([c.params for c in costs], dtype=np.int64)
    macs = np.array([c.macs for c in costs], dtype=np.int64)
    stat = lambda v: {"min": int(v.min()), "median": int(np.median(v)), "max": int(v.max())}  # noqa: E731
    return {
        "name": space.name,
        "source": space.source,
        "resolution": space.resolution,
        "channel_multiple": space.channel_multiple,
        "size": space.size(),
        "unique_blocks": len(space.unique_blocks()),
        "samples": samples,
        "seed": seed,
        "params": stat(params),
        "macs": stat(macs),
    }


if __name__ == "__main__":
    from nas.cli.space import main

    main()
