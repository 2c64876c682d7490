"""One graph op compiled alone by Inductor, for timing the kernel Inductor writes for it.

The compile runs on a thread of its own. Kernels are timed from the partitioner, inside the
model's own compile, and Inductor takes the fake mode and shape env of the compile it finds on
its thread (``TracingContext`` and the dispatch-mode stack are thread-local). Compiled on the
calling thread, the op's inputs became symbols of the model's shape env, and the model's
compile then failed building its guards (``IndexError`` in ``produce_guards_verbose``: a
symbol with no source), seen on an H200 with torch 2.11 and reproduced on the CPU with 2.13
(``tests/test_kernel_timing_modes.py``)."""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx


def inductor_op(target: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Callable[[], Any]:
    """``target(*args, **kwargs)`` as Inductor compiles it alone, a call with no arguments.
    Every real tensor in ``args`` and ``kwargs`` (nested in lists and tuples too) becomes an
    input of a one-node FX graph, the rest stays a constant of it; the graph goes to
    ``torch._inductor.compile`` (no Dynamo) on a thread of its own (the module docstring says
    why)."""
    from torch._inductor import compile as inductor_compile

    g = torch.fx.Graph()
    tensors: list[torch.Tensor] = []

    def lift(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            tensors.append(a)
            return g.placeholder(f"arg{len(tensors)}")
        if isinstance(a, list | tuple):
            return tuple(lift(x) for x in a) if isinstance(a, tuple) else [lift(x) for x in a]
        return a

    node_args = tuple(lift(a) for a in args)
    node_kwargs = {k: lift(v) for k, v in kwargs.items()}
    node = g.call_function(target, node_args, node_kwargs)
    # an op of several results (var_mean, a convolution's backward) gives its tensors one by
    # one: Inductor's output spec takes a flat tuple (torch 2.11 asserts on a nested one)
    result = target(*args, **kwargs)
    if isinstance(result, list | tuple):
        outs = [
            g.call_function(operator.getitem, (node, i))
            for i, r in enumerate(result)
            if isinstance(r, torch.Tensor)
        ]
    else:
        outs = [node]
    g.output(tuple(outs))
    gm, box = torch.fx.GraphModule({}, g), {}

    def compile_alone() -> None:
        try:
            box["fn"] = inductor_compile(gm, tensors)
        except BaseException as e:  # noqa: BLE001 - raised again on the calling thread
            box["error"] = e

    worker = threading.Thread(target=compile_alone, name="memopt-inductor-op")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    fn = box["fn"]
    return lambda: fn(*tensors)
