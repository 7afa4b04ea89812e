"""hwnas: hardware-aware neural architecture search."""

__version__ = "0.1.0"
