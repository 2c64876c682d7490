"""Lightning: a callback that compiles a LightningModule's model attribute with memopt at
setup (before ``configure_optimizers``) and logs the plan table after the first batch.

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = build_model()
        def training_step(self, batch, i):
            return self.model(**batch).loss
        ...
    cb = MemoptLightningCallback("model", level=1)
    L.Trainer(callbacks=[cb], ...).fit(Lit(), loader)
    print(cb.table)

Inside a LightningModule's own ``configure_model`` the same is
``self.model = memopt.optimize(self.model, level=1)`` -- but see :func:`_torch_compile_unwrapped`:
with lightning imported, ``memopt.optimize`` needs the original ``torch.compile``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import lightning as L
import torch

import memopt
from memopt.errors import ConfigError

log = logging.getLogger("memopt")


@contextlib.contextmanager
def _torch_compile_unwrapped() -> Iterator[None]:
    """Importing lightning replaces ``torch.compile`` by a wrapper that deep-copies the
    keyword arguments (lightning.fabric.wrappers._capture_compile_kwargs); memopt's backend
    object holds a lock and cannot be copied. Call the original (``__wrapped__``) meanwhile."""
    patched = torch.compile
    torch.compile = getattr(patched, "__wrapped__", patched)
    try:
        yield
    finally:
        torch.compile = patched


class MemoptLightningCallback(L.Callback):
    """Replace ``pl_module.<attr>`` by ``memopt.optimize(pl_module.<attr>, **kwargs)`` at
    setup; ``self.report`` / ``self.table`` after the first training batch."""

    def __init__(self, attr: str = "model", log_table: bool = True, **optimize_kwargs: Any):
        self.attr = attr
        self.log_table = log_table
        self.optimize_kwargs = optimize_kwargs
        self.compiled: Any = None
        self.report: Any = None
        self.table: str | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or self.compiled is not None:
            return
        inner = getattr(pl_module, self.attr, None)
        if not isinstance(inner, torch.nn.Module):
            names = [n for n, _ in pl_module.named_children()]
            raise ConfigError(
                f"MemoptLightningCallback: {type(pl_module).__name__}.{self.attr} is not a "
                f"module; its submodules are {names}: pass one as attr="
            )
        with _torch_compile_unwrapped():
            self.compiled = memopt.optimize(inner, **self.optimize_kwargs)
        setattr(pl_module, self.attr, self.compiled)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        if self.report is None and self.compiled is not None:
            self.report = memopt.report(self.compiled)
            self.table = self.report.table()
            if self.log_table:
                log.info("memopt plan after the first batch:\n%s", self.table)
