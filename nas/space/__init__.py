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

    conv: kernel            ds: kernel, se (and pw_act, noskip)            ir / fused: kernel, expansion, se
    attn: heads, mlp_ratio (and proj_act)

The keys in parentheses are fixed for the stage, not choices.

Expanded channels are ``make_divisible(in * expansion, channel_multiple)`` and SE channels
``make_divisible(channels * se.ratio, channel_multiple)``, so every channel count stays a
multiple of ``channel_multiple``.

The parameter encoding is fixed-length: every block slot up to the stage's maximum depth is
always sampled (unused slots are ignored when decoding), so NSGA-II and multivariate TPE see
the same parameters in every trial.  Names: ``stem_width``, ``s{i}_depth``, ``s{i}_width``,
``s{i}_b{j}_{option}``, ``head_hidden``.

Its modules: ``parse`` checks the YAML mapping and reads it into a space's parts (``SpaceError``,
``StageSpec``), ``space`` turns the parts into parameters, architectures and blocks (``SearchSpace``),
``catalog`` finds and loads the shipped spaces and any YAML path (``load_space``).  Import their names
from here.
"""

from __future__ import annotations

from nas.space.catalog import (
    SPACES_DIR,
    list_calibration_spaces,
    list_spaces,
    load_space,
    space_names,
    summarize,
)
from nas.space.parse import STAGE_KINDS, SpaceError, StageSpec
from nas.space.space import MAX_PARAMS, MAX_PEAK_ACTIVATION_BYTES, SearchSpace, make_divisible

__all__ = [
    "MAX_PARAMS",
    "MAX_PEAK_ACTIVATION_BYTES",
    "SPACES_DIR",
    "STAGE_KINDS",
    "SearchSpace",
    "SpaceError",
    "StageSpec",
    "list_calibration_spaces",
    "list_spaces",
    "load_space",
    "make_divisible",
    "space_names",
    "summarize",
]
