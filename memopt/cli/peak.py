"""The predicted peak memory of one training step, as plain data.

``peak = parameters + optimizer states + inputs + max over the step of (saved activations
still live + gradients made so far + temporaries)``. Parameters, gradients and optimizer
states are counted from the model's parameter list; the live part comes from the traced
graphs (:mod:`memopt.cli.liveness`), in three phases whose largest is the peak.

Optimizer states (steady state, after the first step):

* ``adamw``/``adam``: two states per parameter (``exp_avg``, ``exp_avg_sq``) in
  ``state_dtype`` -- ``fp32`` (mixed-precision optimizers, the default) or ``param`` (what
  ``torch.optim.AdamW`` does: states in the parameter's dtype) -- plus a 4-byte step per
  tensor;
* ``sgd``: nothing, or one momentum buffer per parameter in the parameter's dtype;
* ``none``: nothing.

``master_weights`` adds an fp32 copy of every 16-bit parameter. Not included: the optimizer's
own temporaries (``foreach`` implementations allocate roughly one parameter-sized buffer per
group; ``fused=True`` does not), the CUDA context, allocator fragmentation, and anything the
training loop keeps besides the loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sympy
import torch
import torch.nn as nn

from memopt.cli.extrapolate import evaluate
from memopt.cli.liveness import PARTS, PhasePeak, StepProfile, phase_of

OPTIMIZERS = ("adamw", "adam", "sgd", "none")
PHASE_TEXT = {
    "forward": "end of the forward",
    "backward_start": "start of the backward",
    "backward_end": "end of the backward / optimizer step",
}


@dataclass(frozen=True)
class Static:
    """Bytes that live for the whole step."""

    parameters: int
    gradients: int
    """Bytes of the gradients of all trainable parameters (parameter dtype)."""
    optimizer: int
    num_parameters: int
    optimizer_text: str


def static_bytes(
    model: nn.Module,
    *,
    optimizer: str = "adamw",
    state_dtype: str = "fp32",
    master_weights: bool = False,
    momentum: bool = False,
) -> Static:
    """Parameter, gradient and optimizer-state bytes of ``model`` (meta or fake is fine)."""
    params = list(model.parameters())
    p_bytes = sum(p.numel() * p.element_size() for p in params)
    trainable = [p for p in params if p.requires_grad]
    g_bytes = sum(p.numel() * p.element_size() for p in trainable)
    opt, text = optimizer_bytes(
        trainable,
        optimizer=optimizer,
        state_dtype=state_dtype,
        master_weights=master_weights,
        momentum=momentum,
    )
    return Static(p_bytes, g_bytes, opt, sum(p.numel() for p in params), text)


def optimizer_bytes(
    params: Sequence[torch.Tensor],
    *,
    optimizer: str,
    state_dtype: str = "fp32",
    master_weights: bool = False,
    momentum: bool = False,
) -> tuple[int, str]:
    """Steady-state optimizer bytes for ``params`` and a short description."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    total, parts = 0, []
    if optimizer in ("adamw", "adam"):
        for p in params:
            size = 4 if state_dtype == "fp32" else p.element_size()
            total += 2 * p.numel() * size + 4
        parts.append(f"{optimizer}: 2 states/param in {state_dtype}")
    elif optimizer == "sgd":
        if momentum:
            total += sum(p.numel() * p.element_size() for p in params)
        parts.append("sgd with momentum" if momentum else "sgd, no momentum")
    else:
        parts.append("no optimizer")
    if master_weights:
        total += sum(p.numel() * 4 for p in params if p.element_size() < 4)
        parts.append("fp32 master weights")
    return total, ", ".join(parts)


@dataclass(frozen=True)
class PeakModel:
    """Static bytes plus the symbolic phase peaks of the traced step."""

    static: Static
    profile: StepProfile

    def at(self, values: Mapping[str, int]) -> Peak:
        """The peak at these symbol values (``{"batch": 8, "seq": 2048}``): of every phase's
        places (:meth:`memopt.cli.liveness._Sweep.peaks`), the largest at these values."""
        best_name, best_val = None, -1
        for name, phase in self.profile.phases.items():
            v = evaluate(phase.total, values)
            if v is not None and v > best_val:
                best_name, best_val = name, v
        phase = self.profile.phases[best_name or "forward"]
        inputs = self.profile.inputs
        total = sympy.Integer(self.static.parameters + self.static.optimizer) + inputs + phase.total
        return Peak(self, phase_of(best_name or "forward"), phase, total, dict(values))


@dataclass(frozen=True)
class Peak:
    """The predicted peak at given sizes, with its breakdown."""

    model: PeakModel
    phase_name: str
    phase: PhasePeak
    total: sympy.Expr
    values: dict[str, int]

    @property
    def bytes(self) -> int:
        v = evaluate(self.total, self.values)
        return -1 if v is None else v

    def rows(self) -> list[tuple[str, sympy.Expr, str]]:
        """``(component, symbolic bytes, note)`` summing to the peak."""
        st, prof = self.model.static, self.model.profile
        return [
            ("parameters", sympy.Integer(st.parameters), f"{st.num_parameters:,} parameters"),
            (
                "gradients",
                self.phase.gradients,
                f"live at the peak; all gradients {_gib(st.gradients)}",
            ),
            ("optimizer states", sympy.Integer(st.optimizer), st.optimizer_text),
            (
                "activations",
                self.phase.activations,
                f"saved for backward, live at the peak; all saved {_gib_expr(prof.saved, self.values)}",
            ),
            ("temporaries", self.phase.temporaries, "working memory at the peak (estimate)"),
            ("inputs", prof.inputs, "token ids and labels"),
        ]

    def next_place(self) -> tuple[int, str, sympy.Expr] | None:
        """Where the peak moves as the batch grows, the other sizes as given: the first
        batch above this one at which another place (another phase, or another place of
        this phase: :meth:`memopt.cli.liveness._Sweep.peaks`) holds more, its phase and
        its total. None when no place overtakes this one (every formula linear in batch)."""
        batch = self.values.get("batch")
        if batch is None:
            return None
        b = sympy.Symbol("batch", integer=True, positive=True)
        others = {k: v for k, v in self.values.items() if k != "batch"}
        subs = {sympy.Symbol(k, integer=True, positive=True): v for k, v in others.items()}
        subs.update({sympy.Symbol(k): v for k, v in others.items()})
        subs[sympy.Symbol("batch")] = b
        found = None
        for name, phase in self.model.profile.phases.items():
            d = sympy.expand((phase.total - self.phase.total).xreplace(subs))
            if d.free_symbols != {b} or sympy.degree(d, b) != 1:
                continue
            slope, rest = d.coeff(b, 1), d.coeff(b, 0)
            if not (slope.is_number and rest.is_number) or slope <= 0:
                continue
            first = int(sympy.floor(-rest / slope)) + 1
            if first > batch and (found is None or first < found[0]):
                fixed = self.total - self.phase.total + phase.total
                found = (first, phase_of(name), sympy.expand(fixed))
        return found

    def to_dict(self) -> dict[str, object]:
        rows = {
            name: {"symbolic": str(e), "bytes": evaluate(e, self.values), "note": note}
            for name, e, note in self.rows()
        }
        return {
            "peak_bytes": self.bytes,
            "peak_symbolic": str(self.total),
            "phase": self.phase_name,
            "components": rows,
            "saved_activations_symbolic": str(self.model.profile.saved),
            "saved_activations_bytes": evaluate(self.model.profile.saved, self.values),
            "all_gradients_bytes": self.model.static.gradients,
            "values": dict(self.values),
            **self._moves(),
        }

    def _moves(self) -> dict[str, object]:
        nxt = self.next_place()
        if nxt is None:
            return {}
        first, phase, total = nxt
        return {"moves": {"from_batch": first, "phase": phase, "symbolic": str(total)}}

    def table(self) -> str:
        """The predicted-peak block ``memopt plan`` prints (``memopt show`` prints the same
        from :meth:`to_dict`)."""
        from memopt.cli.show import peak_lines

        return "\n".join(peak_lines(self.to_dict()))


def _gib(n: int | None) -> str:
    from memopt.symbolic import fmt_bytes

    return fmt_bytes(n)


def _gib_expr(e: sympy.Expr, values: Mapping[str, int]) -> str:
    return _gib(evaluate(e, values))


def combine_regions(profiles: Sequence[StepProfile], values: Mapping[str, int]) -> StepProfile:
    """One profile for a step of several compiled regions (graph breaks).

    Conservative: each phase is the worst region's phase plus every other region's saved
    activations and gradients."""
    if len(profiles) == 1:
        return profiles[0]
    phases = {}
    for name in dict.fromkeys(k for p in profiles for k in p.phases):
        best, best_v = None, -1
        for i, p in enumerate(profiles):
            others = [q for j, q in enumerate(profiles) if j != i]
            ph = p.phases.get(name) or p.phases[phase_of(name)]
            cand = PhasePeak(
                activations=ph.activations + sum((q.saved for q in others), sympy.Integer(0)),
                gradients=ph.gradients + sum((q.gradients for q in others), sympy.Integer(0)),
                temporaries=ph.temporaries,
            )
            v = evaluate(cand.total, values) or 0
            if v > best_v:
                best, best_v = cand, v
        phases[name] = best
    return StepProfile(
        phases=phases,
        saved=sum((p.saved for p in profiles), sympy.Integer(0)),
        gradients=sum((p.gradients for p in profiles), sympy.Integer(0)),
        inputs=sum((p.inputs for p in profiles), sympy.Integer(0)),
    )


__all__ = [
    "OPTIMIZERS",
    "PARTS",
    "PHASE_TEXT",
    "Peak",
    "PeakModel",
    "Static",
    "combine_regions",
    "static_bytes",
]
