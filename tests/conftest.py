import os

import pytest
import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

settings.register_profile(
    "default",
    deadline=None,
    max_examples=6,
    derandomize=True,  # CI runs the same examples every time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("thorough", deadline=None, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _has_cuda() -> bool:
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
