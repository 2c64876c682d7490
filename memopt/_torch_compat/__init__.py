"""Every private torch API memopt touches lives here, so a torch upgrade touches one file;
checked against torch 2.11 and 2.13 (see shared TORCH_NOTES)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import sympy
import torch
import torch.fx
from torch._inductor.custom_graph_pass import CustomPartitionerFn  # noqa: F401  (re-export)
from torch.utils.checkpoint import CheckpointPolicy  # noqa: F401  (re-export)

from memopt._torch_compat.compile_info import (  # noqa: F401  (re-export)
    compile_cache_hits,
    ddp_split_compile,
    fake_call,
    graph_kept,
    inductor_mode_options,
    inductor_setting_names,
    placeholder_sources,
)
from memopt._torch_compat.rng import (  # noqa: F401  (re-export)
    _PLANNING_FOR_CUDA,
    CUDA_RNG_STATE_BYTES,
    is_random_op,
    planning_for_cuda,
    random_targets,
    recompute_saves_rng_state,
    seeded_recompute_state_bytes,
)

TORCH_VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


def min_cut_partition(gm: torch.fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any):
    """Inductor's default partition: ``min_cut_rematerialization_partition``."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    kwargs.setdefault("compiler", "inductor")
    return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)


def compile_fx(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any):
    from torch._inductor.compile_fx import compile_fx as _compile_fx

    return _compile_fx(gm, example_inputs, **kwargs)


def tracing_context() -> Any:
    """What dynamo compiles the current graph in, to compile it again later: its tracing
    context (None outside dynamo) and the float inputs it specialized (``TensorifyState``:
    AOTAutograd's tensorify pass asks dynamo to restart for a float symbol not in that set,
    which a compile outside dynamo cannot do; wav2vec2 under ``dynamic=True``)."""
    return torch._guards.TracingContext.try_get(), frozenset(_tensorify_state())


def _tensorify_state() -> set[str]:
    try:
        from torch._dynamo.symbolic_convert import TensorifyState
    except ImportError:  # a torch without the tensorify pass
        return set()
    return TensorifyState.force_specializations


@contextlib.contextmanager
def tracing(saved: Any):
    """Re-enter what :func:`tracing_context` saved (the fake mode and shape environment, the
    specialized floats) to compile the same graph again; a no-op without a context."""
    ctx, floats = saved if saved is not None else (None, frozenset())
    state = _tensorify_state()
    before = set(state)
    state.clear()
    state.update(floats)
    try:
        with torch._guards.tracing(ctx):
            yield
    finally:
        state.clear()
        state.update(before)


def graph_break_reasons() -> list:
    """Dynamo's graph-break records since its last reset."""
    return list(torch._dynamo.utils.graph_break_reasons)


def saved_tensors_hooks_active() -> bool:
    """Whether saved-tensor hooks are installed (non-reentrant checkpointing, save_on_cpu, a
    user's own): hooks installed inside them would replace theirs."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top is not None and top(False) is not None


def packing_in_compiled_region(max_depth: int = 256) -> bool:
    """Whether a saved-tensor pack hook runs for a compiled region's save (AOTAutograd's
    ``CompiledFunction``), not for eager autograd between graph breaks. Read from the Python
    stack: torch <= 2.13 runs ``Function.apply`` in Python (``cls`` is the class); 2.14 calls
    the class's ``apply`` from ``make_boxed_func``'s ``g`` (its ``f``) without a Python frame."""
    frame = sys._getframe(2)
    for _ in range(max_depth):
        if frame is None:
            return False
        local = frame.f_locals
        for key in ("cls", "ctx", "f"):
            obj = local.get(key)
            if obj is None:
                continue
            owner = getattr(obj, "__self__", obj)  # a bound classmethod: its class
            owner = owner if isinstance(owner, type) else type(owner)
            if "CompiledFunction" in getattr(owner, "__qualname__", ""):
                return True
        frame = frame.f_back
    return False


def in_backward() -> bool:
    """Whether autograd's engine is running a backward on this thread (a checkpoint's
    recomputed forward runs there)."""
    return torch._C._current_graph_task_id() != -1


def register_backend(name: str, fn) -> None:
    from torch._dynamo.backends.registry import _BACKENDS
    from torch._dynamo.backends.registry import register_backend as _reg

    if name not in _BACKENDS:
        _reg(compiler_fn=fn, name=name)


def detect_fake_mode(values: Sequence[Any]):
    """The FakeTensorMode of the fake tensors in ``values`` (None if there are none)."""
    return torch._guards.detect_fake_mode(values)


def detect_shape_env(inputs: Sequence[Any]):
    """The ShapeEnv of the fake tensors in ``inputs`` (None when shapes are static/not fake)."""
    fake_mode = torch._guards.detect_fake_mode(inputs)
    if fake_mode is None:
        return None
    return fake_mode.shape_env


def symbol_values(shape_env) -> dict[sympy.Symbol, int]:
    """Backed hint of every symbol (the sizes of the call that triggered the compile)."""
    if shape_env is None:
        return {}
    table = getattr(shape_env, "backed_var_to_val", None)
    if table is None:  # older torch
        table = shape_env.var_to_val
    return {k: int(v) for k, v in table.items()}


def symbol_sources(shape_env) -> dict[sympy.Symbol, list[tuple[str, int]]]:
    """Map each symbol to ``[(input name, dim)]`` read from dynamo's sources."""
    out: dict[sympy.Symbol, list[tuple[str, int]]] = {}
    if shape_env is None:
        return out
    for sym, sources in shape_env.var_to_sources.items():
        names = []
        for src in sources:
            named = _source_name(src)
            if named is not None:
                names.append(named)
        out[sym] = names
    return out


def _source_name(src) -> tuple[str, int] | None:
    from torch._dynamo.source import TensorProperty, TensorPropertySource

    if not isinstance(src, TensorPropertySource) or src.prop is not TensorProperty.SIZE:
        return None
    return _base_name(src.base), int(src.idx)


def _base_name(base) -> str:
    """A readable, identifier-safe name for a dynamo source (``input_ids``, ``batch_x``)."""
    parts: list[str] = []
    cur = base
    for _ in range(16):
        local = getattr(cur, "local_name", None)
        if local is not None:
            parts.append(str(local))
            break
        index = getattr(cur, "index", None)
        if index is None:
            index = getattr(cur, "member", None)
        if index is not None:
            parts.append(str(index))
        nxt = getattr(cur, "base", None)
        if nxt is None:
            break
        cur = nxt
    name = "_".join(reversed(parts)) if parts else "input"
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def sym_expr(value: Any) -> sympy.Expr:
    """A sympy expression for an int or SymInt."""
    return value.node.expr if isinstance(value, torch.SymInt) else sympy.Integer(int(value))


@contextlib.contextmanager
def no_compile_caches() -> Iterator[None]:
    """Turn off the FX-graph and AOTAutograd caches (tests; stale-graph hazards)."""
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    with iconfig.patch(fx_graph_cache=False), fconfig.patch(enable_autograd_cache=False):
        yield


# --- memopt.params (parameter and optimizer-state offload) ---


def default_store() -> Any:
    """The default process group's key-value store (the rendezvous store under torchrun)."""
    return torch.distributed.distributed_c10d._get_default_store()


def fused_adamw_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    maximize: bool = False,
) -> None:
    """One AdamW update in place (torch's fused kernel; ``steps`` already incremented)."""
    torch._fused_adamw_(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        [],
        steps,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        eps=eps,
        amsgrad=False,
        maximize=maximize,
    )


# --------------------------------------------------------------------------- activation offload


def exact_strides_tags() -> tuple:
    """Op tags asking Inductor to pass a custom op's inputs with the traced strides."""
    tag = getattr(torch.Tag, "needs_exact_strides", None)
    return (tag,) if tag is not None else ()


def cudagraph_unsafe_tags() -> tuple:
    """Op tags keeping an op out of CUDA graphs: under ``mode="reduce-overhead"`` Inductor's
    graph partition runs it between the captured partitions (where partitioning is off, the
    graph is not captured). An offload op's copy on a side stream inside a capture would leave
    the capture with unjoined work."""
    tag = getattr(torch.Tag, "cudagraph_unsafe", None)
    return (tag,) if tag is not None else ()


def copy_many(dsts: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor]) -> None:
    """``dst.copy_(src, non_blocking=True)`` for each pair, in one call where torch has
    ``_foreach_copy_`` (its loop runs in C++: across devices it copies pair by pair, as the
    Python loop does, without a Python call per tensor)."""
    if not dsts:
        return
    foreach = getattr(torch, "_foreach_copy_", None)
    if foreach is not None:
        foreach(list(dsts), list(srcs), non_blocking=True)
        return
    for dst, src in zip(dsts, srcs):
        dst.copy_(src, non_blocking=True)


def storage_use_count(t: torch.Tensor) -> int:
    """How many references hold ``t``'s storage (tensors, views, storage objects)."""
    return int(torch._C._storage_Use_Count(t.untyped_storage()._cdata))


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two (fake or real) tensors share one storage, i.e. one is a view of the other."""
    return storage_key(a) == storage_key(b)


def storage_key(t: torch.Tensor) -> Any:
    """A hashable identity of a (fake or real) tensor's storage."""
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(t.untyped_storage())


def int_hint(value: Any) -> int:
    """An int for an int or SymInt: the backed value of the compile that traced it."""
    if isinstance(value, torch.SymInt):
        return int(value.node.expr.xreplace(symbol_values(value.node.shape_env)))
    return int(value)


def saved_for_backward_descs(flags: Sequence[bool]) -> list | None:
    """AOTAutograd output descriptors for saved values (``flags[i]``: no version-counter
    check); None on a torch without descriptors."""
    try:
        from torch._functorch._aot_autograd.descriptors import (
            SavedForBackwardsAOTOutput,
            SavedForBackwardsNoVcCheckAOTOutput,
        )
    except ImportError:
        return None
    out = (SavedForBackwardsNoVcCheckAOTOutput, SavedForBackwardsAOTOutput)
    return [out[0](i) if f else out[1](i) for i, f in enumerate(flags)]


def aot_eager_backend(partition_fn):
    """A torch.compile backend: AOTAutograd with Inductor's decompositions and
    ``partition_fn``, the partitioned graphs run as FX code (no Inductor codegen). Fast tests
    of partition-time rewrites."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._inductor.compile_fx import select_decomp_table

    kw = dict(decompositions=select_decomp_table(), partition_fn=partition_fn)
    return aot_autograd(fw_compiler=boxed_nop, bw_compiler=boxed_nop, **kw)


NO_VC_CHECK_META = "saved_tensor_with_no_vc_check"
"""node.meta flag of saved tensors stashed on ctx (sorted last among the saved tensors)."""


# --------------------------------------------------------------------------- memopt.cli (plan/fit)


def real_tensors():
    """A context where new tensors are real even inside a compile's fake-tensor mode (device
    calibration runs from the partitioner, where ``torch.randn`` would make fake tensors and
    every timing would be ~0)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


def fake_tensor_mode():
    """A fresh FakeTensorMode (no shape env: dynamo makes its own when it traces)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def dynamo_reset() -> None:
    torch._dynamo.reset()


def dynamo_config(**changes: Any):
    """``torch._dynamo.config.patch(...)`` as a context manager."""
    return torch._dynamo.config.patch(**changes)


def unwrap_backend_error(e: BaseException) -> BaseException:
    """The exception a torch.compile backend raised, out of dynamo's wrappers."""
    from torch._dynamo.exc import BackendCompilerFailed

    seen = 0
    while isinstance(e, BackendCompilerFailed) and seen < 8:
        inner = getattr(e, "inner_exception", None) or e.__cause__
        if inner is None:
            break
        e, seen = inner, seen + 1
    return e


def sdpa_kernels() -> dict[str, Any]:
    """The fused attention ATen ops a CUDA device dispatches ``scaled_dot_product_attention``
    to (they have meta kernels, so fake CPU tensors can trace them)."""
    aten = torch.ops.aten
    return {
        "flash": aten._scaled_dot_product_flash_attention.default,
        "efficient": aten._scaled_dot_product_efficient_attention.default,
    }


def mark_dynamic(t: torch.Tensor, dim: int) -> None:
    """Trace dimension ``dim`` of ``t`` symbolically if the code allows (no error if not)."""
    torch._dynamo.maybe_mark_dynamic(t, dim)


def sympy_locals() -> dict[str, Any]:
    """Torch's sympy functions by name, to parse expressions printed from shape-env sizes
    (``CeilToInt(IntTrueDiv(s, 32))``) back into evaluable sympy."""
    import torch.utils._sympy.functions as fns

    return {
        n: getattr(fns, n)
        for n in dir(fns)
        if n[:1].isupper()
        and isinstance(getattr(fns, n), type)
        and issubclass(getattr(fns, n), sympy.Basic)
    }


def op_returns_alias(target: Any) -> bool:
    """Whether an op's (first) output aliases an input per its schema (``Tensor(a)``: views,
    in-place ops, alias-returning custom ops)."""
    schema = getattr(target, "_schema", None)
    return bool(schema is not None and schema.returns and schema.returns[0].alias_info is not None)


def op_qualified_name(target: Any) -> str:
    """``namespace::name`` of an op overload ('' for other callables)."""
    return str(getattr(getattr(target, "_schema", None), "name", ""))


def inductor_pads_matmuls() -> bool:
    """Whether Inductor pads unaligned matmuls on CUDA (``config.shape_padding``)."""
    import torch._inductor.config as inductor_config

    return bool(getattr(inductor_config, "shape_padding", False))


_ALIGNED_LOWERING = "_memopt_alignment_rule"


def install_alignment_lowerings(rules: dict[Any, str]) -> bool:
    """Give Inductor the alignment of custom ops' outputs, which it otherwise guesses.

    Inductor lowers a custom op to a fallback kernel and marks its output *unaligned* when any
    input is: every CPU tensor counts as unaligned, so a reload from a host buffer, and each
    alias op after it, makes Triton kernels that read the reloaded tensor drop their 16-byte
    divisibility hints. Such kernels compile differently from the same kernels reading a saved
    tensor, and their reductions sum in another order (1-ulp gradient differences).

    ``rules`` maps an op to ``"fresh"`` (its output is a new device allocation: aligned) or
    ``"first"`` (it returns an alias of its first argument: aligned iff that is). The op is
    lowered exactly as Inductor's implicit fallback would lower it, and the rule is applied
    to the output's buffer on GPU devices. Returns False where this torch's lowering internals
    differ (ops handled before the failure keep their new lowering; the rest are untouched).
    """
    try:
        from torch._inductor import ir
        from torch._inductor import lowering as L
        from torch._inductor.virtualized import V
        from torch._library.utils import get_layout_constraint_tag
    except ImportError:
        return False

    def buffer_name(x: Any) -> str | None:
        try:
            return x.get_name()
        except Exception:
            return None

    def on_gpu(x: Any) -> bool:
        try:
            dev = x.get_device()
        except Exception:
            return False
        return dev is not None and dev.type not in ("cpu", "meta")

    for op, rule in rules.items():
        current = L.lowerings.get(op)
        if getattr(current, _ALIGNED_LOWERING, None) == rule:
            continue
        try:
            if current is None:
                tag = get_layout_constraint_tag(op, with_default=True)
                L.make_fallback(op, layout_constraint=L.tag_to_layout_constraint(tag), warn=False)
            inner = L.lowerings[op]
        except Exception:
            return False

        def lowering(*args: Any, _inner=inner, _rule=rule, **kwargs: Any) -> Any:
            out = _inner(*args, **kwargs)
            name = buffer_name(out)
            if name is None or not on_gpu(out):
                return out
            aligned = _rule == "fresh" or (
                bool(args) and isinstance(args[0], ir.IRNode) and not ir.is_unaligned(args[0])
            )
            if aligned:
                V.graph.unaligned_buffers.discard(name)
            return out

        setattr(lowering, _ALIGNED_LOWERING, rule)
        L.lowerings[op] = lowering
    return True


# --------------------------------------------------- memopt plan: eager ops on fake tensors


def fake_value_errors() -> tuple[type[BaseException], ...]:
    """What a fake-tensor op raises when it needs the values it does not have: its output
    shape depends on them (``nonzero``, ``masked_select``, ``_ctc_loss``; torch tags such ops
    ``dynamic_output_shape``), or it returns one (``_local_scalar_dense``: ``.item()``)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    return (DynamicOutputShapeException, DataDependentOutputException)


def fake_unsupported_errors() -> tuple[type[BaseException], ...]:
    """What a fake-tensor op raises when it has no fake or meta kernel at all."""
    from torch._subclasses.fake_tensor import (
        UnsupportedFakeTensorException,
        UnsupportedOperatorException,
    )

    return (UnsupportedOperatorException, UnsupportedFakeTensorException)


def fake_tensor_mode_with_stand_ins(stand_in: Any):
    """A fresh FakeTensorMode (as :func:`fake_tensor_mode`) in which an op that needs values
    (:func:`fake_value_errors`) asks ``stand_in(op, args, kwargs)`` for its result instead,
    inside the mode (``torch.empty`` there makes fake tensors); ``None`` keeps torch's error.

    Only ops dispatched to this mode are affected: eager code on the fake parameters and
    inputs, between compiled regions. Dynamo traces in a mode of its own, where these ops still
    break the graph as in training; nothing global is registered, so nothing is left behind."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    errors = fake_value_errors()

    class StandInFakeTensorMode(FakeTensorMode):
        def dispatch(self, func, types, args=(), kwargs=None):
            try:
                return super().dispatch(func, types, args, kwargs)
            except errors:
                with self:
                    out = stand_in(func, args, kwargs or {})
                if out is None:
                    raise
                return out

    return StandInFakeTensorMode(allow_non_fake_inputs=True)


def tangents_held_to_the_end() -> bool:
    """Whether autograd holds a compiled backward's incoming gradients until it returns (2.11);
    2.13 passes them in a list the graph clears, freeing each after its last read."""
    from torch._functorch._aot_autograd import runtime_wrappers as rw

    return not hasattr(rw, "_codegen_compiled_backward")


def donated_buffers_on() -> bool:
    """Whether AOTAutograd donates saved tensors to the backward (``donated_buffer``)."""
    return bool(getattr(torch._functorch.config, "donated_buffer", False))


def queue_backward_callback(fn) -> None:
    """Run ``fn`` on autograd's thread when the running backward pass ends, before
    ``backward()`` returns (the engine's final callbacks, which FSDP2 uses too; callbacks queued
    while they run are run as well)."""
    torch.autograd.Variable._execution_engine.queue_callback(fn)


# Inductor's layout decisions (channels-last, stride padding, post-grad addmm), in their own file
from memopt._torch_compat.layout import (  # noqa: E402
    StridePadding,
    expandable_to,
    forced_layout_optimization,
    inductor_channels_last_nodes,
    inductor_layout_opt,
    inductor_stride_padding,
    is_gpu,
    is_pointwise_use,
)

__all__ = [
    "StridePadding",
    "expandable_to",
    "forced_layout_optimization",
    "inductor_channels_last_nodes",
    "inductor_layout_opt",
    "inductor_stride_padding",
    "is_gpu",
    "is_pointwise_use",
]


def gpu_sleep(cycles: float) -> None:
    """Keep the current CUDA stream busy for about ``cycles`` GPU clock cycles
    (``torch.cuda._sleep``): work the host queues behind it then runs back to back on the GPU,
    not at the pace the host issues it."""
    torch.cuda._sleep(int(cycles))
