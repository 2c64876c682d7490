"""Inductor's buffer plan of each graph it compiles, read from its wrapper (private API).

After its memory planning pass (``PythonWrapperCodegen.run_wrapper_ir_passes``: a dead buffer
waits in a pool until a later allocation of the same device, dtype and size takes it, and is
deleted only if none does), the wrapper's lines say exactly which buffers the generated code
allocates, reuses, aliases and deletes, in order. :func:`wrapper_plans` turns them into a
:class:`memopt.inductor_buffers.GraphBuffers` per compiled graph; the arithmetic over them
lives there (plain data, no torch internals).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch

from memopt.inductor_buffers import Event, GraphBuffers

log = logging.getLogger("memopt")


def _main_device() -> str:
    """The graph's device type: CUDA when it has CUDA buffers (host copies it makes, memopt's
    offloads, are not device memory)."""
    from torch._inductor.virtualized import V

    types = getattr(V.graph, "device_types", ())
    return "cuda" if "cuda" in types else str(getattr(V.graph, "device_type", "cpu"))


def _nbytes(buf: Any) -> int | None:
    """Bytes of a buffer's storage at the compile's size hints, 0 for one on another device
    than the graph's (None: cannot tell)."""
    from torch._inductor.virtualized import V

    try:
        dev = buf.get_device()
        if dev is not None and dev.type != _main_device():
            return 0
        get = getattr(V.graph, "get_allocation_storage_size", None)
        size = get(buf) if get is not None else buf.get_layout().storage_size()
        sv = V.graph.sizevars
        hint = getattr(sv, "optimization_hint", None) or sv.size_hint
        return int(hint(size, fallback=0)) * buf.get_dtype().itemsize
    except Exception:  # a layout without a storage (NoneLayout, MultiOutputLayout)
        return None


def _origin(buf: Any, order: dict[str, int]) -> str:
    """The FX node (of the graph Inductor lowered) whose value a buffer holds: the last of its
    origins in graph order (a fused kernel's origins are every node it computes), "" when
    none is known."""
    try:
        names = [n.name for n in buf.get_origins() if n.name in order]
    except Exception:  # a buffer without origins
        return ""
    return max(names, key=order.__getitem__, default="")


def _events(lines: list[Any], order: dict[str, int]) -> list[Event]:
    from torch._inductor import ir
    from torch._inductor.codegen import wrapper as w
    from torch._inductor.virtualized import V

    out: list[Event] = []
    for line in lines:
        if isinstance(line, w.AllocateLine):
            n = line.node
            out.append(Event("alloc", n.get_name(), _nbytes(n) or 0, origin=_origin(n, order)))
        elif isinstance(line, w.ReuseLine):
            old, new = line.node.get_name(), line.reused_as.get_name()
            out.append(Event("alias", new, 0, old, origin=_origin(line.reused_as, order)))
            if line.delete_old:
                out.append(Event("free", old))
        elif isinstance(line, w.ReinterpretLine):
            out.append(Event("alias", line.reused_as.get_name(), 0, line.node.get_name()))
        elif isinstance(line, w.FreeIfNotReusedLine):
            # a reused buffer's storage waits in the pool from here to its reuse
            out.append(Event("pool" if line.is_reused else "free", line.node.get_name()))
        elif isinstance(line, w.FreeLine):
            out.append(Event("free", line.node.get_name()))
        elif isinstance(line, w.ExternKernelAllocLine):
            node = line.node
            if isinstance(node.layout, (ir.MultiOutputLayout, ir.NoneLayout)):
                out.append(Event("alloc", node.get_name(), 0))  # its outputs are MultiOutputs
            elif (of := _alias_of(node, 0)) is not None:
                out.append(Event("alias", node.get_name(), 0, of))
            else:
                out.append(
                    Event(
                        "alloc", node.get_name(), _nbytes(node) or 0, kernel=True,
                        origin=_origin(node, order),
                    )
                )  # fmt: skip
        elif isinstance(line, w.MultiOutputLine):
            buf = V.graph.try_get_buffer(line.result_name)
            of = _aliased_by_multi_output(buf)
            if of is not None:
                out.append(Event("alias", line.result_name, 0, of))
                continue
            n = _nbytes(buf) if buf is not None else None
            origin = _origin(buf, order) if buf is not None else ""
            out.append(
                Event("alloc", line.result_name, n or 0, line.arg_name, kernel=True, origin=origin)
            )
    return out


def _aliased_by_multi_output(buf: Any) -> str | None:
    """The input a fallback op's output aliases (its schema's return has an alias set, as in
    memopt's ``wait_offload``, ``wait_reload`` and ``barrier``: ``Tensor(a) -> Tensor(a)``), or
    None for a new tensor (a return without one, even where the op mutates an argument: batch
    norm's running statistics). Inductor lowers such an op to a kernel with a multi-output
    layout and reads each result through a ``MultiOutput``, which the wrapper does not
    allocate (before torch 2.14; from 2.14 a one-tensor op's kernel holds its output itself:
    :func:`_alias_of` index 0)."""
    parents = getattr(buf, "inputs", None) or ()
    if len(parents) != 1:
        return None
    index = next((i for _, i in getattr(buf, "indices", ()) if isinstance(i, int)), 0)
    return _alias_of(parents[0], index)


def _alias_of(kernel: Any, index: int) -> str | None:
    """The input a fallback kernel's output ``index`` aliases by the op's schema (None: a new
    tensor); a schema this reader cannot follow: the kernel's first aliased input."""
    try:
        names = list(kernel.get_inputs_that_alias_output())
    except Exception:
        return None
    if not names:
        return None
    try:
        schema = kernel.op_overload._schema
        mine = schema.returns[index].alias_info
        if mine is None:
            return None  # a new tensor beside aliased (mutated) arguments
        args, kwargs = kernel.unflatten_args(kernel.inputs, kernel.constant_args)
        for i, a in enumerate(schema.arguments):
            v = args[i] if i < len(args) else kwargs.get(a.name)
            if a.alias_info is None or not set(a.alias_info.after_set) & set(mine.before_set):
                continue
            if hasattr(v, "get_name"):
                return v.get_name()
    except Exception:  # a schema this reader cannot follow
        pass
    first = names[0]  # a buffer's name (torch 2.14) or the buffer
    return first if isinstance(first, str) else getattr(first, "get_name", lambda: None)()


def _read(wrapper: Any) -> GraphBuffers:
    from torch._inductor.virtualized import V

    g = V.graph
    inputs = {}
    for name, box in g.graph_inputs.items():
        if isinstance(box, torch._inductor.ir.TensorBox):
            inputs[name] = _nbytes(box.data.data if hasattr(box.data, "data") else box.data)
    outputs = []
    for o in g.graph_outputs:
        try:
            outputs.append(o.get_name())
        except Exception:
            outputs.append(None)
    module = getattr(g, "module", None)
    ops = module.graph.nodes if module is not None else ()
    nodes = tuple(n.name for n in ops if n.op not in ("placeholder", "output"))
    fx_out = module.graph.output_node() if module is not None else None
    fx_names = (
        tuple(a.name if isinstance(a, torch.fx.Node) else None for a in fx_out.args[0])
        if fx_out is not None and isinstance(fx_out.args[0], (tuple, list))
        else ()
    )
    return GraphBuffers(
        backward=bool(getattr(g, "is_backward", False)),
        device=_main_device(),
        inputs={k: v or 0 for k, v in inputs.items()},
        events=tuple(_events(wrapper.lines, {n: i for i, n in enumerate(nodes)})),
        outputs=tuple(outputs),
        fx_outputs=fx_names,
        nodes=nodes,
        module=module,
    )


@contextlib.contextmanager
def wrapper_plans(sink: Callable[[GraphBuffers], None]) -> Iterator[None]:
    """Call ``sink`` with the buffer plan of every graph Inductor generates code for while
    active (an FX-graph cache hit generates none: turn the caches off to see every graph). A
    wrapper this torch shapes differently is logged and skipped, never an error."""
    from torch._inductor.codegen import wrapper as w

    cls = w.PythonWrapperCodegen
    orig = cls.run_wrapper_ir_passes

    def run(self, is_inference, *args, **kwargs):
        orig(self, is_inference, *args, **kwargs)
        try:
            sink(_read(self))
        except Exception as e:  # noqa: BLE001 - a diagnostic must not break the compile
            log.debug("memopt: could not read Inductor's buffer plan: %s", e)

    cls.run_wrapper_ir_passes = run
    try:
        yield
    finally:
        cls.run_wrapper_ir_passes = orig


def eager_backward() -> contextlib.AbstractContextManager:
    """Lower the backward with the forward, not at the first backward call (so a compile
    sees both graphs' buffer plans); a no-op on a torch without the switch."""
    import torch._functorch.config as fconfig

    if not hasattr(fconfig, "force_non_lazy_backward_lowering"):
        return contextlib.nullcontext()
    return fconfig.patch(force_non_lazy_backward_lowering=True)
