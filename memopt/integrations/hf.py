"""Hugging Face Trainer: pass ``memopt.optimize(model)`` as the model; the callback logs the
plan table after the first step and keeps the report.

    model = memopt.optimize(AutoModelForCausalLM.from_config(cfg), level=1)
    cb = MemoptCallback()
    Trainer(model=model, args=TrainingArguments(...), train_dataset=ds, callbacks=[cb]).train()
    print(cb.table)

Do not set ``torch_compile=True`` / ``torch_compile_backend="memopt"``: accelerate only knows
its own backend names. The compiled module keeps the model's forward signature, so the
default ``remove_unused_columns=True`` keeps the model's columns.
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

import memopt
from memopt.integrations.common import first_report

log = logging.getLogger("memopt")


class MemoptCallback(TrainerCallback):
    """After the first optimizer step: ``self.report`` (a :class:`memopt.report.Report`) and
    ``self.table`` (its text), logged on the ``memopt`` logger at INFO when ``log_table``."""

    def __init__(self, log_table: bool = True) -> None:
        self.log_table = log_table
        self.report: memopt.report.Report | None = None  # type: ignore[name-defined]
        self.table: str | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        if self.report is None and model is not None:
            self.report = first_report(model)
            self.table = self.report.table()
            if self.log_table:
                log.info("memopt plan after the first step:\n%s", self.table)
        return control
