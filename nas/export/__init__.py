"""Converters: a torch model -> ONNX (fp32, QDQ int8 in each runtime's form), an ExecuTorch program
(``.pte``), an OpenVINO model or a LiteRT flatbuffer (``.tflite``), verified against torch.

``onnx`` (``export_onnx``, ``ort_session``), ``qdq`` (onnxruntime's static PTQ and the QDQ settings per
runtime), ``edge`` (ExecuTorch and OpenVINO; writes and verifies every edge format), ``litert`` (LiteRT:
litert-torch and ai-edge-quantizer), ``verify`` (outputs and accuracy against torch).  What reads
checkpoints and times the files sits above: ``nas.train.deploy``.
"""

from __future__ import annotations

__all__ = ["EDGE_FORMATS", "check_format"]

EDGE_FORMATS = {"pte": "executorch", "openvino": "openvino", "tflite": "litert"}  # export format -> runtime


def check_format(fmt: str) -> None:
    """Refuse an export format that is neither ONNX nor one of ``EDGE_FORMATS`` (before torch loads).

    Raises:
        ValueError: the formats there are, and the one given.
    """
    if fmt != "onnx" and fmt not in EDGE_FORMATS:
        *rest, last = EDGE_FORMATS
        raise ValueError(f"format must be onnx, {', '.join(rest)} or {last}, got {fmt!r}")
