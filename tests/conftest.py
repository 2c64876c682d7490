import os
import tempfile

import pytest
import torch
import torch._functorch.config as fconfig
import torch._inductor.config as iconfig

# Each test compiles afresh: warm caches would skip the partitioner and hide bugs
# (tests/test_unknown_and_cache.py turns them back on on purpose).
iconfig.fx_graph_cache = False
fconfig.enable_autograd_cache = False
os.environ["MEMOPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="memopt-test-cache-")
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
