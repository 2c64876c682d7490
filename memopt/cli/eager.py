"""Eager code between compiled regions, run on fake tensors: stand-ins for what needs values.

In training, a model graph-breaks where its Python code needs a tensor's value (``.item()``,
``if x.any():``) or calls an op whose output shape depends on values (``nonzero``,
``masked_select``, ``x[mask]``, ``unique``, ``ctc_loss``); that code runs eagerly, with real
values, between the compiled regions. ``memopt plan`` traces with fake tensors, which have
shapes but no values, so each such read or op gets a stand-in, named with its source line:

* a value read (``.item()``, ``bool()``, ``int()``, ``float()``, ``.tolist()``): 1, 1.0, or
  False for a truth value (data checks such as ``if (labels >= vocab).any(): raise`` pass),
  True where torch's own checks read it (``torch._check_tensor_all(cond)``, ``torch._assert``:
  transformers' ``torch_compilable_check``, Llava's image-token count, must hold);
* an op whose output size depends on values: its largest output (every element selected or
  distinct; ``_ctc_loss``'s alignment table for the longest target the targets' shape allows),
  so memory planned after it is an upper bound.

An op with neither (no fake kernel, or a value-dependent size without a bound, e.g.
``repeat_interleave`` with tensor repeats) stops the trace: :func:`stopped_at` names it and
its line, and the regions traced before it are planned.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import torch

from memopt import _torch_compat as compat

#: Tensor methods that read a value; on a fake tensor in eager code they return a stand-in.
_VALUE_METHODS = ("item", "__bool__", "__int__", "__float__")
_OWN_FILES = (os.sep + "torch" + os.sep, os.sep + "memopt" + os.sep, "contextlib.py")


def _own(filename: str) -> bool:
    return any(s in filename for s in _OWN_FILES)


def value_stand_in(t: torch.Tensor) -> bool | int | float:
    # False for a truth value: data checks (``if (labels >= vocab).any(): raise``) pass
    if t.dtype == torch.bool:
        return False
    return 1.0 if t.is_floating_point() or t.is_complex() else 1


def _for_torch_check() -> bool:
    """Whether the value being read is the condition of one of torch's checks
    (``torch._check_tensor_all``, ``torch._check*``, ``torch._assert``), which must hold."""
    frame = sys._getframe(2)
    while frame is not None and _own(frame.f_code.co_filename):
        code = frame.f_code
        if code.co_filename.endswith(_TORCH_INIT) and code.co_name.startswith(
            ("_check", "_assert")
        ):
            return True
        frame = frame.f_back
    return False


_TORCH_INIT = os.sep + "torch" + os.sep + "__init__.py"


def user_line(frame: Any = None) -> str:
    """``file:line`` of the innermost caller outside torch and memopt."""
    frame = frame or sys._getframe(2)
    while frame is not None and _own(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _note(what: str, why: str, traced: str) -> str:
    return f"{what} at {user_line()}: eager code between graphs; {why} (traced with {traced})"


@contextlib.contextmanager
def stand_in_values(used: list[str]) -> Iterator[None]:
    """In eager code (between compiled regions), reading a fake tensor's value (``.item()``,
    ``bool()``, ``int()``, ``float()``) returns a stand-in and appends a note to ``used``;
    compiled code and real tensors are untouched."""
    from torch._subclasses.fake_tensor import FakeTensor

    originals = {name: getattr(torch.Tensor, name) for name in _VALUE_METHODS}

    def patched(name: str):
        original = originals[name]

        def read(self: torch.Tensor, *args: Any, **kwargs: Any):
            if not isinstance(self, FakeTensor) or torch.compiler.is_compiling():
                return original(self, *args, **kwargs)
            value = value_stand_in(self) if name != "__bool__" else False
            if self.dtype == torch.bool and name in ("item", "__bool__") and _for_torch_check():
                value = True
            convert = {"__int__": int, "__float__": float, "__bool__": bool}.get(name)
            value = convert(value) if convert else value
            method = "." + name + "()" if not name.startswith("__") else name.strip("_") + "()"
            used.append(_note(method, "its value is not known when planning", repr(value)))
            return value

        # dynamo must not trace into the stand-in: a call to it breaks the graph, as the
        # method it replaces would, and runs eagerly
        return torch.compiler.disable(read, recursive=True)

    try:
        for name in _VALUE_METHODS:
            setattr(torch.Tensor, name, patched(name))
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


# ------------------------------------------------- ops whose output size depends on values
# Each rule: (op's args, kwargs) -> (outputs made with torch.empty inside the fake mode, what
# the stand-in is). Sizes are the largest the op can return for these inputs.


def _empty(like: torch.Tensor, shape: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype or like.dtype, device=like.device)


def _nonzero(x: torch.Tensor) -> tuple[Any, str]:
    return _empty(x, (x.numel(), x.dim()), torch.int64), f"all {x.numel()} elements nonzero"


def _masked_select(x: torch.Tensor, mask: torch.Tensor) -> tuple[Any, str]:
    n = math.prod(torch.broadcast_shapes(x.shape, mask.shape))
    return _empty(x, (n,)), f"all {n} elements selected"


def _unique(x, dim=None, inverse=False, counts=False, always_both=False) -> tuple[Any, str]:
    """torch's own fake ``unique`` outputs (``fake_impls._unique``) at ``nnz`` = all."""
    n = x.numel() if dim is None else x.shape[dim]
    values = _empty(x, (n,) if dim is None else x.shape)
    both = always_both or (dim is not None and x.device.type == "cpu")
    inv_shape = x.shape if dim is None else (n,)
    inv = _empty(x, inv_shape if inverse or both else (0,), torch.int64)
    cnt = _empty(x, (n,) if counts or both else (0,), torch.int64)
    return (values, inv, cnt), f"all {n} {'elements' if dim is None else 'slices'} distinct"


def _unique2(x, sorted=True, return_inverse=False, return_counts=False):
    return _unique(x, None, return_inverse, return_counts)


def _unique_legacy(x, sorted=True, return_inverse=False):
    (values, inv, _), what = _unique(x, None, return_inverse)
    return (values, inv), what


def _unique_dim(x, dim, sorted=True, return_inverse=False, return_counts=False):
    return _unique(x, dim % max(x.dim(), 1), return_inverse, return_counts)


def _unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    return _unique(x, None if dim is None else dim % max(x.dim(), 1), return_inverse, return_counts)


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_inf=False):
    """``(neg_log_likelihood [batch], log_alpha [batch, T, 2*S+1])``, S the longest target:
    known from int lengths, else the most the targets' shape allows (padded ``(batch, S)``
    targets: S; concatenated ones: all of them)."""
    t, b = log_probs.shape[0], log_probs.shape[1]
    if isinstance(target_lengths, list | tuple):
        s, what = max(target_lengths, default=0), "the longest target"
    else:
        s = targets.shape[1] if targets.dim() == 2 else targets.shape[0]
        what = "the longest target the targets' shape allows"
    nll = _empty(log_probs, (b,))
    return (nll, _empty(log_probs, (b, t, 2 * s + 1))), f"{what}, {s} labels"


_SHAPE_RULES: dict[str, tuple[Callable[..., tuple[Any, str]], str]] = {
    "aten::nonzero": (_nonzero, "its output size depends on values"),
    "aten::masked_select": (_masked_select, "its output size depends on values"),
    "aten::_unique2": (_unique2, "its output size depends on values"),
    "aten::_unique": (_unique_legacy, "its output size depends on values"),
    "aten::unique_dim": (_unique_dim, "its output size depends on values"),
    "aten::unique_consecutive": (_unique_consecutive, "its output size depends on values"),
    "aten::_ctc_loss": (_ctc_loss, "its alignment table's size depends on the target lengths"),
}


def _op_name(func: Any) -> str:
    return compat.op_qualified_name(func).removeprefix("aten::") or str(func)


def stand_in_op(used: list[str]) -> Callable[[Any, tuple, dict], Any]:
    """The ``stand_in`` of :func:`memopt._torch_compat.fake_tensor_mode_with_stand_ins`:
    a value read (``_local_scalar_dense``: ``.tolist()``, or ``.item()`` reached another way)
    returns a stand-in value, an op of ``_SHAPE_RULES`` its largest output; each appends a
    note to ``used``. Any other op: None (torch's error stands)."""

    def stand_in(func: Any, args: tuple, kwargs: dict) -> Any:
        name = compat.op_qualified_name(func)
        if name == "aten::_local_scalar_dense" and args and isinstance(args[0], torch.Tensor):
            value = value_stand_in(args[0])
            used.append(_note(_op_name(func), "its value is not known when planning", repr(value)))
            return value
        rule = _SHAPE_RULES.get(name)
        if rule is None:
            return None
        fn, why = rule
        out, traced = fn(*args, **kwargs)
        used.append(_note(_op_name(func), why, f"its largest output: {traced}"))
        return out

    return stand_in


def stopped_at(e: BaseException, tb: TracebackType | None) -> str | None:
    """``aten op at file:line`` when ``e`` is a fake-tensor op that cannot run without values
    or has no fake kernel (the trace stopped in eager code); None for any other error."""
    if not isinstance(e, compat.fake_value_errors() + compat.fake_unsupported_errors()):
        return None
    func = getattr(e, "func", None)
    op = _op_name(func) if func is not None else type(e).__name__
    where = "?"
    while tb is not None:  # the innermost frame outside torch and memopt
        if not _own(tb.tb_frame.f_code.co_filename):
            where = f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return f"{op} at {where}"
