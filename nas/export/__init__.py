"""Converters: a torch model -> ONNX (fp32, QDQ int8 in each runtime's form), an ExecuTorch program
(``.pte``), an OpenVINO model or a LiteRT flatbuffer (``.tflite``), verified against torch.

``onnx`` (``export_onnx``, ``ort_session``), ``qdq`` (onnxruntime's static PTQ and the QDQ settings per
runtime), ``edge`` (ExecuTorch and OpenVINO; writes and verifies every edge format), ``litert`` (LiteRT:
litert-torch and ai-edge-quantizer), ``verify`` (outputs and accuracy against torch).  What reads
checkpoints and times the files sits above: ``nas.train.deploy``.
"""
