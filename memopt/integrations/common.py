"""What the framework recipes share: finding memopt's compiled module inside a wrapper."""

from __future__ import annotations

from typing import Any

import torch

import memopt


def compiled_inside(model: torch.nn.Module) -> torch.nn.Module:
    """The compiled module :func:`memopt.optimize` returned, inside the wrappers frameworks
    add (DDP / accelerate's ``.module``, a LightningModule's attribute); ``model`` when none.
    A compiled module is recognised by its ``_orig_mod`` (what ``torch.compile`` wraps)."""
    for m in model.modules():
        if isinstance(getattr(m, "_orig_mod", None), torch.nn.Module):
            return m
    return model


def first_report(model: torch.nn.Module) -> Any:
    """``memopt.report`` of the memopt-compiled module in ``model``."""
    return memopt.report(compiled_inside(model))
