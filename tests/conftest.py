import os
import tempfile

# C++ kernels without explicit SIMD: cold builds take a sixth to a quarter less time on a 2-core
# box (a tiny Llama's compile 24.9 -> 18.5 s, two test files 153 -> 128 s; kernel builds weigh
# most in a clean clone's run), and what the tests check (plans, bytes, gradients against
# torch.compile) is not about vectorized code. Read by Inductor's config at import; inherited
# by the processes the suite starts.
# TORCHINDUCTOR_VEC_ISA_OK=1 bash tests/run.sh runs the suite on vectorized kernels.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch._functorch.config as fconfig  # noqa: E402
import torch._inductor.config as iconfig  # noqa: E402

from tests import early  # noqa: E402
from tests.kernel_cache import drop_broken_kernels, inductor_cache_dir  # noqa: E402

# Each test compiles afresh: warm caches would skip the partitioner and hide bugs
# (tests/test_unknown_and_cache.py turns them back on on purpose).
iconfig.fx_graph_cache = False
iconfig.cpp.vec_isa_ok = os.environ["TORCHINDUCTOR_VEC_ISA_OK"] == "1"  # if read before us
fconfig.enable_autograd_cache = False
os.environ["MEMOPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="memopt-test-cache-")
# a kernel build killed in an earlier run leaves a short .so that this run would load and fail
# on (tests/kernel_cache.py); once, before this process or any it starts compiles
_DROPPED = [] if early.in_aside_process() else drop_broken_kernels(inductor_cache_dir())
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
    "test_inductor_buffers.py::test_a_compiled_plan_above_its_byte_budget_is_replanned_before_any_measurement",
    "test_inductor_buffers.py::test_a_tied_lm_heads_addmm_is_in_the_planners_peak",
    "test_step_regions.py::test_a_mask_every_layer_saves_is_counted_once_per_step",
    "test_plan_applied.py",
    "test_cli_rng_state.py",
    "test_offload_sweep.py::test_mamba2_offload_rebuilds_its_lone_gated_norm_view_from_its_base",
    "test_offload_sweep.py::test_convbert_offload_keeps_torch_compiles_gradients",
    "test_coverage_layers.py::test_layers_that_ran_eagerly_are_named_once",
    "test_coverage_layers.py::test_hf_checkpointed_layers_are_said_exactly_when_they_ran_eagerly",
    "test_dynamic_floats.py::test_a_float_argument_under_a_step_plan_compiles_again_with_eagers_gradients",
    "test_offload_split_layers.py::test_a_region_with_too_few_layers_offloads_nothing_and_says_why",
    "test_ddp.py",  # two gloo ranks compiling: 65 s warm, 556 s in a clean-clone CI run
    # over ~6 s alone, 15 s in a full run (fifty-seventh session, tests/run.sh --durations=0)
    "test_candidates_gap.py::test_qwen2_logits_dropped_by_torch_at_budget_0_1_are_a_plan_of_their_own",
    "test_cli_datadep.py::test_wav2vec2_plans_every_region_around_ctc",
    "test_cli_errors.py::test_console_entry_point_exit_code",
    "test_cli_plan.py::test_llama_predicted_activation_bytes_equal_measured",
    "test_cli_progress.py::test_each_compiled_region_is_traced_once",
    "test_cli_ties.py::test_tied_weight_is_one_parameter_with_one_gradient",
    "test_compile_modes.py::test_mode_and_options_reach_every_regions_inductor_compile",
    "test_coverage.py::test_a_region_whose_outputs_need_no_gradient_is_no_cache_hit",
    "test_entry_points.py::test_backend_by_name_without_importing_memopt",
    "test_fused_recompute.py::test_the_model_holds_what_the_fused_swiglu_backward_kernel_holds",
    "test_fusion_guard.py::test_the_guard_keeps_inductors_peak_at_the_model_s",
    "test_integrations_titan.py::test_torchtitan_llama3_trains_through_its_apply_compile_with_memopt",
    "test_kept_graph.py::test_a_kept_graph_through_donated_buffers_is_a_memopt_error",
    "test_kept_graph.py::test_with_donation_off_two_backwards_give_torch_compiles_gradients",
    "test_kernel_times_deferred.py::test_a_region_compiled_without_room_is_priced_with_its_kernels_after_the_step",
    "test_kernel_timing_modes.py::test_reductions_compiled_alone_inside_the_models_compile_leave_it_intact",
    "test_layers_encdec.py::test_t5_both_stacks_and_the_layers_override",
    "test_layers_encdec.py::test_whisper_offload_layers_reaches_into_the_decoder",
    "test_offload_forward_calls.py::test_layers_run_by_their_forward_are_offloaded",
    "test_offload_forward_calls.py::test_squeezebert_offloads_its_first_layer",
    "test_offload_gateless.py::test_conv_layers_stay_on_the_device_with_the_reason",
    "test_offload_relaid.py::test_views_of_a_relaid_host_copy_give_torch_compiles_gradients",
    "test_planner_reuse.py::test_tiny_qwen2_live_bytes_against_the_profiler",
    "test_recompute_attention.py::test_levels_keep_attention_and_a_plan_string_recomputes_it",
    "test_softcap.py::test_the_soft_cap_recompute_is_found_when_the_excess_holds_only_for_plans_keeping_it",
    "test_step_report.py::test_dynamic_report_is_at_the_latest_call_and_at_chosen_sizes",
    "test_training_modes.py::test_evaluation_between_training_steps_is_not_a_region_and_changes_nothing",
    "test_training_modes.py::test_level_1_and_a_budget_are_exact_under_autocast_and_with_frozen_weights",
    "test_zoo.py::test_quick_zoo_estimate_is_exact[dit]",
    "test_zoo.py::test_quick_zoo_estimate_is_exact[swin]",
)


#: Files whose tests run in a second pytest process started when collection ends (tests/early.py:
#: start_aside), beside this one, whose items for them come last and take that process's
#: outcomes: a compile is mostly single-threaded Python, and these files' compiles (about half
#: of this process's CPU time) would otherwise wait for the others'. Not a file with its own
#: start_early. A session of only these files runs them here.
ASIDE = (
    "test_core_models.py",
    "test_budget.py",
    "test_cli_depth.py",
    "test_candidates_gap.py",
    "test_recompute_attention.py",
    "test_readme.py",
    "test_layers_encdec.py",
    "test_step_counts.py",
    "test_step_report.py",
    "test_offload_api.py",
    "test_cli_fit.py",
    "test_cli_ties.py",
    "test_offload_models.py",
    "test_cli_plan.py",
    "test_inductor_buffers.py",
    "test_integrations.py",
    "test_params_api.py",
    "test_planner_reuse.py",
    "test_cli_rng_state.py",
    "test_architecture.py",
)


def _file(item) -> str:
    return item.nodeid.split("::")[0].split("/")[-1]


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        where = item.nodeid.split("/")[-1]
        if any(where == s or where.startswith(s + "::") or where.startswith(s + "[") for s in SLOW):
            item.add_marker(slow)
    if not early.in_aside_process():
        aside = [item for item in items if _file(item) in ASIDE]
        if len(aside) < len(items):  # last: this process waits for none of them before its own
            items[:] = [item for item in items if _file(item) not in ASIDE] + aside
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    # a test module may start work in the background now (tests/test_zoo.py, tests/early.py:
    # start_early), and the ASIDE files' tests their own process; not when only collecting
    if session.config.option.collectonly or early.in_aside_process():
        return
    for module in dict.fromkeys(getattr(item, "module", None) for item in session.items):
        if hasattr(module, "start_early"):
            module.start_early(session.items)
    aside = [item for item in session.items if _file(item) in ASIDE]
    if aside and len(aside) < len(session.items):
        early.start_aside(aside)


def pytest_runtest_logreport(report):
    if early.in_aside_process():
        early.write_aside_report(report)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def pytest_terminal_summary(terminalreporter):
    """The aside process's slowest tests (its own ``--durations``): this process sees only
    their waits. And the broken kernel builds deleted before the run."""
    for path in _DROPPED:
        terminalreporter.write_line(f"deleted a broken Inductor kernel build first: {path}")
    done = early.aside_done()
    if done is None:
        return
    out = done.stdout
    at = out.find("slowest")
    if at >= 0:
        terminalreporter.write_sep("=", "the aside process (tests/early.py)")
        terminalreporter.write(out[out.rfind("\n", 0, at) + 1 :].split("\n=")[0] + "\n")
