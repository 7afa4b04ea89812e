"""Quantization-aware training with our own fake-quant modules, exported as QDQ ONNX.

Why own modules (and not ``torch.ao.quantization`` FX / pt2e): the deployment form is fixed —
QDQ ONNX with the same quantization as ``nas.export.qdq.QDQ_SETTINGS`` (the onnxruntime
post-training baseline and the ``cpu_int8`` latency table) — and a few explicit modules give
exactly that, on timm's blocks, without depending on quantization APIs that torch is moving
around (eager/FX are deprecated in favour of torchao's pt2e flow, whose ONNX export path does
not give onnxruntime's u8s8 per-channel QDQ form).

The scheme (matching onnxruntime's static QDQ quantizer with ``QDQ_SETTINGS``):

* **Weights**: int8, symmetric, per output channel, scale ``max|w| / qmax``; ``qmax`` = 64 with
  ``reduce_range`` (onnxruntime's 7-bit weights, range [-64, 64]) else 127.  Recomputed from the
  current weights at every step (straight-through estimator).
* **Activations**: uint8, asymmetric, per tensor, range always containing 0,
  ``scale = (max - min) / 255``, ``zero_point = round(-min / scale)``.  Ranges are calibrated by
  min/max over training batches on the float model (like the baseline), then follow an EMA of
  each batch's min/max during fine-tuning, then freeze (``freeze``).
* **BatchNorm folded** into the preceding convolution before fine-tuning (``fold_bn``): the
  network trained is the one deployed.
* **Where**: every tensor is quantized once, where it is produced — the network input, each
  conv's output after a ReLU / ReLU6 (onnxruntime drops the activation into the quantized conv)
  or before and after any other activation (hard-swish, swish, GELU run in float between
  Dequantize/Quantize), residual sums, the squeeze-excite pool, gate and product, and the head's
  pool.  Self-attention cores stay float (their weights are still int8).

For a TensorRT target (``quant_settings_for``, after ``nas.export.qdq.qdq_settings_for``) the
activations are **int8, symmetric** (zero point 0, ``scale = max(|min|, |max|) / 127``), weights use
the full [-127, 127] range, conv outputs feeding a non-ReLU activation are not quantized (TensorRT
fuses the activation and quantizes its output, the next layer's input) and biases stay float.

Export (``export_qdq``): the fake-quant activations become ``QuantizeLinear`` /
``DequantizeLinear`` pairs (TorchScript exporter, opset 17); each conv / linear weight becomes
an int8 initializer with per-channel scales behind a ``DequantizeLinear`` and each bias, where
the input is quantized, an int32 initializer with scale ``input_scale * weight_scale`` — the
form onnxruntime fuses into ``QLinearConv`` and TensorRT reads as explicit quantization.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import BatchNormAct2d, ConvNormAct
from timm.models._efficientnet_blocks import (
    ConvBnAct,
    DepthwiseSeparableConv,
    EdgeResidual,
    InvertedResidual,
    SqueezeExcite,
)
from torch import nn

from nas.builder import AttentionLayer, HeadLayer
from nas.compress.quant_settings import QuantSettings
from nas.export.onnx import export_onnx
from nas.export.qdq import finalize_qdq, qdq_settings_for

__all__ = ["ActQuant", "QATNet", "QConv2d", "QLinear", "calibrate", "export_qdq", "fold_bn", "prepare_qat", "quant_settings_for", "set_observers", "weight_qmax"]

log = logging.getLogger(__name__)

# conv -> BN pairs of timm's blocks (module attribute names)
_FOLD_PAIRS: dict[type, tuple[tuple[str, str], ...]] = {
    ConvBnAct: (("conv", "bn1"),),
    DepthwiseSeparableConv: (("conv_dw", "bn1"), ("conv_pw", "bn2")),
    InvertedResidual: (("conv_pw", "bn1"), ("conv_dw", "bn2"), ("conv_pwl", "bn3")),
    EdgeResidual: (("conv_exp", "bn1"), ("conv_pwl", "bn2")),
    ConvNormAct: (("conv", "bn"),),
}
_RELU_LIKE = (nn.ReLU, nn.ReLU6, nn.Identity)


def quant_settings_for(target: Any | None, *, reduce_range: bool = True, ema: float = 0.01) -> QuantSettings:
    """How QAT quantizes for ``target`` (a ``nas.target.Target``; None: onnxruntime): the scheme of
    ``nas.export.qdq.qdq_settings_for(target)``; ``reduce_range`` applies to onnxruntime's u8/s8 form."""
    q = qdq_settings_for(target)
    if q["activation_type"] == "QInt8":
        return QuantSettings(reduce_range=bool(q["reduce_range"]), ema=ema, symmetric=True)
    return QuantSettings(reduce_range=reduce_range, ema=ema)


def weight_qmax(reduce_range: bool) -> int:
    return 64 if reduce_range else 127


# --------------------------------------------------------------------------------------------
# BN folding


class FoldedAct(nn.Module):
    """What is left of a ``BatchNormAct2d`` once its BN is folded into the conv: the activation."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


def _fold(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> None:
    with torch.no_grad():
        std = torch.sqrt(bn.running_var + bn.eps)
        gamma = bn.weight if bn.affine else torch.ones_like(std)
        beta = bn.bias if bn.affine else torch.zeros_like(std)
        k = gamma / std
        conv.weight.mul_(k.view(-1, 1, 1, 1))
        b = beta - bn.running_mean * k
        if conv.bias is not None:
            b = b + conv.bias * k
        conv.bias = nn.Parameter(b.clone())


def fold_bn(model: nn.Module) -> nn.Module:
    """A copy of ``model`` (eval mode) with every conv -> BatchNorm of timm's blocks folded."""
    model = copy.deepcopy(model).eval()
    n = 0
    for mod in list(model.modules()):
        pairs = next((p for cls, p in _FOLD_PAIRS.items() if isinstance(mod, cls)), ())
        if isinstance(mod, HeadLayer) and mod.style == "conv_pool":
            pairs = (("conv_head", "bn2"),)
        for conv_name, bn_name in pairs:
            conv, bn = getattr(mod, conv_name), getattr(mod, bn_name)
            if not isinstance(conv, nn.Conv2d) or not isinstance(bn, nn.BatchNorm2d):
                raise ValueError(f"cannot fold {type(mod).__name__}.{bn_name} into {conv_name}: unexpected "
                                 f"{type(conv).__name__} / {type(bn).__name__}")
            _fold(conv, bn)
            act = bn.act if isinstance(bn, BatchNormAct2d) else nn.Identity()
            setattr(mod, bn_name, FoldedAct(act))
            n += 1
    log.debug("folded %d BatchNorm layers", n)
    return model


# --------------------------------------------------------------------------------------------
# fake-quant modules


class ActQuant(nn.Module):
    """Per-tensor fake quantization with observed (min/max, EMA) ranges: asymmetric uint8, or
    symmetric int8 (zero point 0) when ``symmetric``."""

    def __init__(self, ema: float = 0.01, symmetric: bool = False) -> None:
        super().__init__()
        self.ema, self.symmetric = ema, symmetric
        self.register_buffer("lo", torch.zeros(()))
        self.register_buffer("hi", torch.zeros(()))
        self.register_buffer("seen", torch.zeros((), dtype=torch.bool))
        self.mode = "ema"  # minmax | ema | frozen
        self.enabled = True

    @property
    def qrange(self) -> tuple[int, int]:
        return (-128, 127) if self.symmetric else (0, 255)

    def qparams(self) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = torch.clamp(self.lo, max=0.0), torch.clamp(self.hi, min=0.0)
        if self.symmetric:
            scale = torch.maximum(-lo, hi) / 127.0
            scale = torch.where(scale > torch.finfo(torch.float32).tiny, scale, torch.ones_like(scale))
            return scale.float(), torch.zeros((), dtype=torch.int32)
        scale = (hi - lo) / 255.0
        scale = torch.where(scale > torch.finfo(torch.float32).tiny, scale, torch.ones_like(scale))
        zp = torch.clamp(torch.round(-lo / scale), 0, 255).to(torch.int32)
        return scale.float(), zp

    @torch.no_grad()
    def _observe(self, x: torch.Tensor) -> None:
        lo, hi = x.min().float(), x.max().float()
        if not bool(self.seen):
            self.lo.copy_(lo)
            self.hi.copy_(hi)
            self.seen.fill_(True)
        elif self.mode == "minmax":
            self.lo.copy_(torch.minimum(self.lo, lo))
            self.hi.copy_(torch.maximum(self.hi, hi))
        else:
            self.lo.lerp_(lo, self.ema)
            self.hi.lerp_(hi, self.ema)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "minmax" or (self.mode == "ema" and self.training):
            self._observe(x)
        if not self.enabled or not bool(self.seen):
            return x
        scale, zp = self.qparams()
        return torch.fake_quantize_per_tensor_affine(x, scale, zp, *self.qrange)

    def extra_repr(self) -> str:
        return f"lo={float(self.lo):.4g}, hi={float(self.hi):.4g}, mode={self.mode}"


def _fq_weight(w: torch.Tensor, qmax: int, axis: int = 0) -> torch.Tensor:
    dims = [d for d in range(w.ndim) if d != axis]
    absmax = w.detach().abs().amax(dim=dims)
    scale = torch.where(absmax > 0, absmax / qmax, torch.ones_like(absmax)).float()
    zp = torch.zeros(scale.shape, dtype=torch.int32, device=w.device)
    return torch.fake_quantize_per_channel_affine(w, scale, zp, axis, -qmax, qmax)


class QConv2d(nn.Module):
    """A conv whose weight is fake-quantized per output channel (symmetric int8)."""

    def __init__(self, conv: nn.Conv2d, qmax: int) -> None:
        super().__init__()
        self.conv, self.qmax = conv, qmax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv._conv_forward(x, _fq_weight(self.conv.weight, self.qmax), self.conv.bias)

    def materialize(self) -> nn.Conv2d:
        c = copy.deepcopy(self.conv)
        with torch.no_grad():
            c.weight.copy_(_fq_weight(c.weight, self.qmax))
        return c


class QLinear(nn.Module):
    def __init__(self, linear: nn.Linear, qmax: int) -> None:
        super().__init__()
        self.linear, self.qmax = linear, qmax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, _fq_weight(self.linear.weight, self.qmax), self.linear.bias)

    def materialize(self) -> nn.Linear:
        c = copy.deepcopy(self.linear)
        with torch.no_grad():
            c.weight.copy_(_fq_weight(c.weight, self.qmax))
        return c


class QAct(nn.Module):
    """A folded BN's activation with its quantization points (see the module docs)."""

    def __init__(self, act: nn.Module, ema: float) -> None:
        super().__init__()
        self.pre = None if isinstance(act, _RELU_LIKE) else ActQuant(ema)
        self.act = act
        self.post = ActQuant(ema)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre is not None:
            x = self.pre(x)
        return self.post(self.act(x))


class QSqueezeExcite(nn.Module):
    """timm ``SqueezeExcite`` with the pool, reduce, expand, gate and product quantized."""

    def __init__(self, se: SqueezeExcite, ema: float) -> None:
        super().__init__()
        self.conv_reduce, self.conv_expand, self.gate = se.conv_reduce, se.conv_expand, se.gate
        self.q_pool = ActQuant(ema)
        self.q_reduce = QAct(se.act1, ema)
        self.q_expand = ActQuant(ema)
        self.q_gate = ActQuant(ema)
        self.q_out = ActQuant(ema)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.q_pool(x.mean((2, 3), keepdim=True))
        s = self.q_reduce(self.conv_reduce(s))
        s = self.q_gate(self.gate(self.q_expand(self.conv_expand(s))))
        return self.q_out(x * s)


class QOut(nn.Module):
    """Quantizes a layer's output (a residual sum, an attention layer's output)."""

    def __init__(self, layer: nn.Module, ema: float) -> None:
        super().__init__()
        self.layer = layer
        self.q = ActQuant(ema)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(self.layer(x))


class QHead(nn.Module):
    """``nas.builder.HeadLayer`` with its pool (and hidden layer) quantized; logits stay float."""

    def __init__(self, head: HeadLayer, ema: float) -> None:
        super().__init__()
        self.style = head.style
        self.global_pool, self.classifier, self.drop = head.global_pool, head.classifier, head.drop
        self.q_pool = ActQuant(ema)
        if head.style == "conv_pool":
            self.conv_head, self.bn2 = head.conv_head, head.bn2  # bn2 is a QAct after folding
        elif head.style == "pool_conv":
            self.conv_head, self.flatten = head.conv_head, head.flatten
            self.q_hidden = QAct(head.act2, ema)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.style == "conv_pool":
            x = self.q_pool(self.global_pool(self.bn2(self.conv_head(x))))
        elif self.style == "pool_conv":
            x = self.flatten(self.q_hidden(self.conv_head(self.q_pool(self.global_pool(x)))))
        else:
            x = self.q_pool(self.global_pool(x))
        return self.classifier(self.drop(x))


class QATNet(nn.Module):
    """A BN-folded ``ArchNet`` with fake quantization; ``arch`` is the float network's."""

    def __init__(self, folded: nn.Module, settings: QuantSettings) -> None:
        super().__init__()
        self.arch = folded.arch
        self.settings = settings
        self.quant_in = ActQuant(settings.ema)
        self.stem, self.blocks, self.head = folded.stem, folded.blocks, folded.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(self.quant_in(x))))


def _replace_children(mod: nn.Module, fn) -> None:
    for name, child in list(mod.named_children()):
        new = fn(child)
        if new is not child:
            setattr(mod, name, new)
        else:
            _replace_children(child, fn)


def prepare_qat(model: nn.Module, settings: QuantSettings | None = None) -> QATNet:
    """Fold BN, insert fake quantization; ``model`` (an ``ArchNet``) is not modified."""
    settings = settings or QuantSettings()
    if not hasattr(model, "arch") or not hasattr(model, "blocks"):
        raise ValueError("prepare_qat needs a network built by nas.builder.build")
    folded = fold_bn(model)
    ema, qmax = settings.ema, weight_qmax(settings.reduce_range)
    keys = folded.arch.keys()

    def acts(m: nn.Module) -> nn.Module:
        if isinstance(m, FoldedAct):
            return QAct(m.act, ema)
        if isinstance(m, SqueezeExcite):
            return QSqueezeExcite(m, ema)
        return m

    _replace_children(folded, acts)
    # residual sums and attention outputs
    for i, (blk, key) in enumerate(zip(folded.blocks, keys[1:-1])):
        if isinstance(blk, AttentionLayer) or key.block.has_skip(key.in_ch):
            folded.blocks[i] = QOut(blk, ema)
    folded.head = QHead(folded.head, ema)

    def weights(m: nn.Module) -> nn.Module:
        if type(m) is nn.Conv2d:
            return QConv2d(m, qmax)
        if type(m) is nn.Linear:
            return QLinear(m, qmax)
        return m

    _replace_children(folded, weights)
    net = QATNet(folded, settings)
    if settings.symmetric:  # TensorRT: Q/DQ on layer inputs; a conv's output into an activation stays float
        for mod in net.modules():
            if isinstance(mod, QAct):
                mod.pre = None
            elif isinstance(mod, QSqueezeExcite):
                mod.q_expand = nn.Identity()
        for q in _act_quants(net):
            q.symmetric = True
    return net.train(model.training)


def _act_quants(model: nn.Module) -> list[ActQuant]:
    return [m for m in model.modules() if isinstance(m, ActQuant)]


def set_observers(model: nn.Module, mode: str, *, enabled: bool = True) -> None:
    """Set every activation quantizer's range mode (``minmax``, ``ema``, ``frozen``)."""
    if mode not in ("minmax", "ema", "frozen"):
        raise ValueError(f"observer mode must be minmax, ema or frozen, got {mode!r}")
    for q in _act_quants(model):
        q.mode, q.enabled = mode, enabled


@torch.no_grad()
def calibrate(model: QATNet, batches: Iterable[tuple[torch.Tensor, torch.Tensor] | torch.Tensor]) -> int:
    """Min/max activation ranges over ``batches`` on the float (folded) network; then EMA mode."""
    set_observers(model, "minmax", enabled=False)
    was = model.training
    model.eval()
    n = 0
    for b in batches:
        x = b[0] if isinstance(b, (tuple, list)) else b
        model(x)
        n += 1
    model.train(was)
    if n == 0:
        raise ValueError("QAT calibration got no batches")
    set_observers(model, "ema", enabled=True)
    return n


# --------------------------------------------------------------------------------------------
# export


class _FixedQuant(nn.Module):
    """An ``ActQuant`` with its range frozen into constants (exported as plain Q/DQ initializers)."""

    def __init__(self, q: ActQuant) -> None:
        super().__init__()
        scale, zp = q.qparams()
        self.scale, self.zp, self.qrange = float(scale), int(zp), q.qrange

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fake_quantize_per_tensor_affine(x, self.scale, self.zp, *self.qrange)


def _materialize(model: QATNet) -> nn.Module:
    m = copy.deepcopy(model).eval()
    missing = [n for n, q in m.named_modules() if isinstance(q, ActQuant) and not bool(q.seen)]
    if missing:
        raise ValueError(f"QAT export: {len(missing)} activation quantizer(s) never saw data ({missing[0]}, ...); "
                         f"calibrate the model first")

    def mat(x: nn.Module) -> nn.Module:
        if isinstance(x, ActQuant):
            return _FixedQuant(x)
        return x.materialize() if isinstance(x, (QConv2d, QLinear)) else x

    _replace_children(m, mat)
    return m


def export_qdq(model: QATNet, in_shape: tuple[int, int, int], *, batch: int = 1) -> bytes:
    """The QAT network as QDQ ONNX (see the module docs)."""
    m = _materialize(model)
    x = torch.zeros(batch, *in_shape)
    data = export_onnx(m, x, exporter="torchscript")
    return finalize_qdq(data, weight_qmax=weight_qmax(model.settings.reduce_range),
                        quantize_bias=not model.settings.symmetric)
