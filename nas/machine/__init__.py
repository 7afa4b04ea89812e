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

# no lazy exports: nothing here loads a heavy library (standard library and this package's light modules)
from nas.machine.identity import OtherProcessorWarning, RuntimeUnavailable, cpu_identity, device_mismatch
from nas.machine.versions import installed_version

__all__ = ["OtherProcessorWarning", "RuntimeUnavailable", "cpu_identity", "device_mismatch", "installed_version"]
