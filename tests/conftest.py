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
    "MEMOPT_DISABLE_PASSES",
):
    os.environ.pop(_name, None)


#: Tests over ~10 s on a 2-core box (their files' names, or file::test): the quick subset
#: ``bash tests/run.sh -m "not slow"`` leaves them out; CI runs everything.
SLOW = (
    "test_budget.py",
    "test_offload_api.py",
    "test_core_models.py::test_hf_gpt2_dynamic_symbolic_names",
    "test_core_models.py::test_llama_swiglu_level1_grads_match",
    "test_core_models.py::test_biasgelu_on_hf_models",
    "test_core_models.py::test_dropout_training_grads_match_plain_compile",
    "test_cli_depth.py",
    "test_cli_fit.py",
    "test_params_fsdp.py",
    "test_zoo.py::test_zoo_model",
    "test_step_fsdp.py",
    "test_architecture.py::test_a_disabled_rewrite_leaves_the_plan_unapplied",
    "test_integrations.py::test_hf_trainer_trains_an_optimized_model_with_the_default_columns",
    "test_readme.py",
    "test_params_api.py::test_optimize_fsdp_param_offload_trains_like_adamw_and_reports_placement",
    "test_params_api.py::test_optimize_param_offload_auto_grows_after_measuring_and_trains_like_adamw",
    "test_step_report.py::test_hf_gradient_checkpointing_sizes_are_known_and_exact",
    "test_recompute_attention.py::test_attention_recompute_with_offload_keeps_the_rng_state_in_its_slot",
)


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        where = item.nodeid.split("/")[-1]
        if any(where == s or where.startswith(s + "::") or where.startswith(s + "[") for s in SLOW):
            item.add_marker(slow)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    # a test module may start work in the background now (tests/test_zoo.py, tests/early.py:
    # start_early); not when only collecting
    if session.config.option.collectonly:
        return
    for module in dict.fromkeys(getattr(item, "module", None) for item in session.items):
        if hasattr(module, "start_early"):
            module.start_early(session.items)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
