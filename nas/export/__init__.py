"""Export: ONNX (fp32) and QDQ (int8) files, verified against torch and timed."""
