"""How QAT quantizes: ``QuantSettings`` (checked without torch, so the training settings that hold
them are read and refused before the quantization code loads)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["QuantSettings"]


@dataclass(frozen=True)
class QuantSettings:
    """How QAT quantizes (defaults: ``nas.export.qdq.QDQ_SETTINGS``)."""

    reduce_range: bool = True  # 7-bit weights ([-64, 64]) as onnxruntime's reduce_range
    ema: float = 0.01  # activation range EMA momentum during fine-tuning
    symmetric: bool = False  # int8 symmetric activations (zero point 0) and float biases: TensorRT's form

    @property
    def form(self) -> str:
        """The int8 form in words: TensorRT's symmetric one, or onnxruntime's u8/s8."""
        return ("TensorRT's int8 form (symmetric, zero point 0)" if self.symmetric else
                "onnxruntime's CPU int8 form (u8 activations, s8 weights)")

    def __post_init__(self) -> None:
        if not isinstance(self.symmetric, bool):
            raise ValueError(f"qat.symmetric must be true or false, got {self.symmetric!r}")
        if not isinstance(self.reduce_range, bool):
            raise ValueError(f"qat.reduce_range must be true or false, got {self.reduce_range!r}")
        if not 0 < self.ema <= 1:
            raise ValueError(f"qat.ema must be in (0, 1], got {self.ema!r}")
