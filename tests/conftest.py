import os

import pytest
import torch

# Each test compiles afresh: warm caches would skip the partitioner and hide bugs.
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
for _name in (
    "MEMOPT_LEVEL",
    "MEMOPT_CONFIG",
    "MEMOPT_PROBE_LEVEL",
    "MEMOPT_STRICT",
    "MEMOPT_BUDGET",
):
    os.environ.pop(_name, None)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
