"""What this machine is: the processor's identity, the check that it is the device a target or a table
describes, and the versions of the runtimes installed here.  Standard library only, so a target
(``nas.target``) checks its processor without loading torch.

    identity.py      cpu_identity, device_mismatch, RuntimeUnavailable, OtherProcessorWarning
    versions.py      installed_version: a runtime's installed version
    hwnas_device.py  the device's identity as a device bundle reads it (standalone: copied into every
                     bundle under this name, beside measure_bundle.py); identity.py reads a Jetson's
                     board and release with it

The GPU's fields (name, driver, CUDA, read through torch) are added by
``nas.latency.runtimes.device_identity``.
"""

from __future__ import annotations

from nas._lazy import lazy_exports

_HOMES = {
    "OtherProcessorWarning": "identity",
    "RuntimeUnavailable": "identity",
    "cpu_identity": "identity",
    "device_mismatch": "identity",
    "installed_version": "versions",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
