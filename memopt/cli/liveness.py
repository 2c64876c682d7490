"""The live bytes of one compiled step, from its partitioned forward and backward graphs.

FX in, plain sympy out (:class:`StepProfile`); :mod:`memopt.cli.peak` does the arithmetic.

The step is one line of positions: the forward graph's ops, then the backward graph's, then
one position for the optimizer step. Every tensor that owns its storage (views are charged to
the tensor they alias) is live from the op that makes it to the last kernel that reads it (a
value read by a temporary that Inductor fuses away is read where that temporary's consumers run:
:class:`memopt.memory_rules.ReadPoints`), with these exceptions:

* a saved activation (a forward output the backward reads) lives until its last backward
  reader; parameters and inputs are not charged here (they are static);
* a recomputed tensor made by an extern kernel, or a saved one AOTAutograd donates, is gone
  at its last reader when that kernel writes its output into it (Inductor's in-place reuse,
  :func:`memopt.memory_rules.in_place_reader`, the budget planner's rule too);
* the forward's user outputs (logits next to the loss) live to the end of the forward (a
  training loop that keeps only ``.loss`` frees them then);
* the backward's outputs (parameter gradients) live to the optimizer step;
* ops that return an alias of an input (views, in-place ops, memopt's ``barrier`` and
  ``wait_*`` ops) allocate nothing; host copies made by ``memopt::offload`` and tensors on
  another device than the traced one are not device memory;
* temporaries that Inductor fuses away are not charged: a temporary counts only when the op
  that makes it or one that reads it is an extern kernel (matmul, attention, convolution, an
  unknown op), i.e. when it must exist in memory. This is an estimate: Inductor's fusion and
  buffer reuse decide the real working memory;
* on CUDA (``pad_matmuls``) Inductor pads a compute-bound matmul whose sizes are not a multiple
  of 8 (16-bit) or 4 (fp32) elements (``shape_padding``, ``fx_passes/pad_mm.py``): each padded
  operand is a copy, live from the op that makes the operand to the matmul (an over-estimate
  kept on purpose: ``memory_rules.padded_copies``). A 50,257-token vocabulary makes two
  logits-sized copies in the backward of the LM head (measured on an H100: the backward
  allocates the logits gradient and both padded copies at once). Traced
  on CUDA tensors the graph holds them already (Inductor's ``pad_mm`` runs among the
  joint-graph passes, before the partitioner), and nothing is added.

Each phase reports its peak split into saved activations, gradients and temporaries, as sympy
expressions of the readable shape symbols, chosen at the compile-time sizes. The phases: the
forward; the backward up to the last layer's backward (``backward_start``: loss, head, every
layer but the bottom one); and the backward from the second layer on, with the optimizer step
(``backward_end``). They overlap, and their maximum is the step's peak. In a stack of identical
layers one more layer adds its saved activations at every position of the first two phases
and its gradients at every position of the last, the same amount everywhere in a phase, so a
phase's peak stays at the same op when layers are added (:mod:`memopt.cli.extrapolate` relies
on this). Without detected layers (``node.meta[LAYER]``) the backward is split in halves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import sympy
import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import meta_keys as mk
from memopt.facts import alias_users as _alias_users
from memopt.facts import aliased_input as _aliased_input
from memopt.facts import is_rng_state, layout_copied_inputs, rng_state_bytes
from memopt.facts import storage_root as _root
from memopt.memory_rules import (  # noqa: F401 (re-export)
    ReadPoints,
    donated_saved,
    fusible,
    in_place_reader,
    padded_copies,
    padded_operands,
)
from memopt.memory_rules import must_exist as _must_exist
from memopt.memory_rules import start as _start
from memopt.passes.build_planning_problem import pads_in_graph
from memopt.symbolic import SymbolTable, tensor_bytes_expr

PHASES = ("forward", "backward_start", "backward_end")
PARTS = ("activations", "gradients", "temporaries")
ALT = "~"
"""``backward_start~1``: another place of that phase whose peak is larger at other sizes."""


PROBES = (0.5, 2.0, 8.0)
"""Scales of the traced sizes at which :meth:`_Sweep.peaks` looks for another peak's place."""


def phase_of(name: str) -> str:
    """The phase a profile's peak entry belongs to (``backward_start~1``: backward_start)."""
    return name.split(ALT, 1)[0]


@dataclass(frozen=True)
class PhasePeak:
    """Live bytes at the peak of one phase, by kind (readable sympy expressions)."""

    activations: sympy.Expr
    gradients: sympy.Expr
    temporaries: sympy.Expr

    @property
    def total(self) -> sympy.Expr:
        return self.activations + self.gradients + self.temporaries

    def parts(self) -> dict[str, sympy.Expr]:
        return {p: getattr(self, p) for p in PARTS}


@dataclass(frozen=True)
class StepProfile:
    """One compiled region: its phase peaks and totals (parameters and optimizer excluded)."""

    phases: dict[str, PhasePeak]
    saved: sympy.Expr
    """All saved-activation bytes (unique storages, parameters and inputs excluded)."""
    gradients: sympy.Expr
    """Bytes of all the backward's outputs (the gradients)."""
    inputs: sympy.Expr
    """Bytes of the forward's non-parameter graph inputs (token ids, labels)."""


def _owns(node: torch.fx.Node, device: str | None) -> bool:
    """A call_function node that allocates a tensor on ``device`` (not an alias, not a tuple,
    not a host copy)."""
    val = node.meta.get(mk.TORCH_VAL)
    return (
        node.op == "call_function"
        and isinstance(val, torch.Tensor)
        and _root(node) is node
        and (device is None or val.device.type == device)
        and compat.op_qualified_name(node.target) != "memopt::offload"
    )


class _Sweep:
    """Intervals ``[start, end]`` (inclusive positions) with a kind, an int size, an expr."""

    def __init__(self, symbols: SymbolTable):
        self.symbols = symbols
        self.items: list[tuple[int, int, str, int, sympy.Expr]] = []

    def add(self, start: int, end: int, kind: str, val: torch.Tensor) -> None:
        expr = tensor_bytes_expr(val)
        size = compat.int_hint(val.numel()) * val.element_size()
        self.items.append((start, max(start, end), kind, size, expr))

    def add_bytes(self, start: int, end: int, kind: str, nbytes: int) -> None:
        """A value of fixed size (a generator state, sized as on the device planned for)."""
        self.items.append((start, max(start, end), kind, nbytes, sympy.Integer(nbytes)))

    def add_scaled(
        self, start: int, end: int, kind: str, val: torch.Tensor, factor: sympy.Rational
    ) -> None:
        """A tensor of ``factor`` times the size of ``val`` (a padded copy of it)."""
        expr = tensor_bytes_expr(val) * factor
        size = int(compat.int_hint(val.numel()) * val.element_size() * factor)
        self.items.append((start, max(start, end), kind, size, expr))

    def peak(self, lo: int, hi: int) -> PhasePeak:
        """The largest live total over positions ``lo..hi`` (inclusive), split by kind."""
        return self.peaks(lo, hi, ())[0]

    def peaks(self, lo: int, hi: int, factors: Sequence[float] = PROBES) -> list[PhasePeak]:
        """The phase's peak at the traced sizes, then, in the order found, the peaks at other
        places of the phase that are the largest where the symbols are scaled by ``factors``
        (each alone and all together): a peak's place can move with the batch (DeepSeek-V2:
        a few kernels into the backward at batch 2, at its start at batch 3; sweep 8), and
        each place's formula holds only where that place is the largest."""
        sizes = [size for *_, size, _ in self.items]
        places = [self._argmax(lo, hi, sizes)]
        for probe in _probes(self.symbols.values, factors):
            table, cache = SymbolTable(self.symbols.rename, probe), {}
            scaled = [_probe_size(table, expr, cache) for *_, expr in self.items]
            if None not in scaled:
                places.append(self._argmax(lo, hi, scaled))
        out: list[PhasePeak] = []
        for pos in dict.fromkeys(places):
            sums = {p: sympy.Integer(0) for p in PARTS}
            for s, e, kind, _, expr in self.items:
                if s <= pos <= e:
                    sums[kind] += expr
            peak = PhasePeak(**{k: self.symbols.readable(v) for k, v in sums.items()})
            if all(sympy.expand(peak.total - o.total) != 0 for o in out):
                out.append(peak)
        return out

    def _argmax(self, lo: int, hi: int, sizes: Sequence[int]) -> int:
        delta = [0] * (hi - lo + 2)
        for (s, e, *_), size in zip(self.items, sizes, strict=True):
            if e < lo or s > hi:
                continue
            delta[max(s, lo) - lo] += size
            delta[min(e, hi) - lo + 1] -= size
        best, best_pos, acc = -1, lo, 0
        for i in range(hi - lo + 1):
            acc += delta[i]
            if acc > best:
                best, best_pos = acc, lo + i
        return best_pos


def _probes(values: Mapping[str, int], factors: Sequence[float]) -> list[dict[str, int]]:
    """The symbol values scaled by each factor: each symbol alone, then all together."""
    out = []
    for f in factors:
        for names in [[k] for k in values] + ([list(values)] if len(values) > 1 else []):
            probe = {k: max(1, int(v * f)) if k in names else v for k, v in values.items()}
            if probe != dict(values) and probe not in out:
                out.append(probe)
    return out


def _probe_size(table: SymbolTable, expr: sympy.Expr, cache: dict) -> int | None:
    if expr not in cache:
        cache[expr] = table.evaluate(table.readable(expr))
    return cache[expr]


class _Positions:
    """Positions of a partitioned step's kernels: forward ops, then backward ops, then the
    optimizer step; read points with fusion (:class:`memopt.memory_rules.ReadPoints`)."""

    def __init__(self, fw: torch.fx.GraphModule, bw: torch.fx.GraphModule):
        self.fw_ops = [n for n in fw.graph.nodes if n.op == "call_function"]
        self.bw_ops = [n for n in bw.graph.nodes if n.op == "call_function"]
        self.nf = len(self.fw_ops)
        self.end = self.nf + len(self.bw_ops)  # the optimizer step
        self.fpos = {n: i for i, n in enumerate(self.fw_ops)}
        self.bpos = {n: self.nf + i for i, n in enumerate(self.bw_ops)}
        self.fread, self.bread = ReadPoints(self.fpos), ReadPoints(self.bpos)
        self.bw_inputs = {n.name: n for n in bw.graph.nodes if n.op == "placeholder"}
        self.claimed: set[torch.fx.Node] = set()

    def reused_at(self, buffer: torch.fx.Node, last: int) -> bool:
        """Whether the backward kernel at ``last`` writes its output into ``buffer``
        (:func:`memopt.memory_rules.in_place_reader`; one buffer per kernel)."""
        reader = in_place_reader(buffer, self.bpos, _nbytes)
        if reader is None or reader in self.claimed or self.bpos[reader] != last:
            return False
        self.claimed.add(reader)
        return True

    def last_bw_use(self, names: list[str]) -> int | None:
        uses = [
            self.bread.at(u)
            for name in names
            if name in self.bw_inputs
            for u in _alias_users(self.bw_inputs[name])
        ]
        uses = [u for u in uses if isinstance(u, int)]
        return max(uses) if uses else None


def _sweep_forward(fw, bw, num_fwd_outputs, at: _Positions, sweep, device) -> sympy.Expr:
    """Forward values: saved activations live to their last backward use; returns their bytes."""
    fw_out = fw.graph.output_node().args[0]
    saved_names = {n.name for n in fw_out[num_fwd_outputs:] if isinstance(n, torch.fx.Node)}
    user_outs = {_root(n) for n in fw_out[:num_fwd_outputs] if isinstance(n, torch.fx.Node)}
    saved = sympy.Integer(0)
    donated = donated_saved(fw, bw, num_fwd_outputs)
    rng = _rng_state_inputs(fw_out[num_fwd_outputs:], bw)
    for n in at.fw_ops:
        if not _owns(n, device):
            continue
        users = _alias_users(n)
        aliases = [n] + [u for u in users if _aliased_input(u) is not None and _root(u) is n]
        last = at.fread.last(users, at.fpos[n])
        saved_here = [a.name for a in aliases if a.name in saved_names]
        if saved_here:
            bw_last = at.last_bw_use(saved_here + [rng[a] for a in saved_here if a in rng])
            end = bw_last if bw_last is not None else at.nf
            read = [at.bw_inputs[x] for x in saved_here if x in at.bw_inputs]
            read = [p for p in read if p.users]
            if n.name in donated and len(read) == 1 and at.reused_at(read[0], end):
                end -= 1  # a backward kernel writes its output into it (in-place reuse)
            if is_rng_state(n):
                sweep.add_bytes(at.fpos[n], end, "activations", rng_state_bytes(n))
                saved += rng_state_bytes(n)
            else:
                sweep.add(at.fpos[n], end, "activations", n.meta["val"])
                saved += tensor_bytes_expr(n.meta[mk.TORCH_VAL])
        elif n in user_outs or any(u.op == "output" for u in users):
            sweep.add(at.fpos[n], at.nf - 1, "temporaries", n.meta["val"])
        elif _must_exist(n, users):
            sweep.add(_start(n, at.fpos), last, "temporaries", n.meta["val"])
    for p in layout_copied_inputs(fw, num_fwd_outputs):  # channels-last copies Inductor saves
        first = [at.fpos[u] for u in p.users if u in at.fpos]
        bw_last = at.last_bw_use([p.name])
        val = p.meta[mk.TORCH_VAL]
        sweep.add(min(first, default=0), at.nf if bw_last is None else bw_last, "activations", val)
        saved += tensor_bytes_expr(val)
    for p in bw.graph.nodes:  # tangents (incoming gradients of the forward's outputs)
        if p.op == "placeholder" and p.name not in saved_names and _is_tensor(p):
            if p.name in rng.values():  # a saved RNG state, charged with its forward value
                continue
            if device is not None and p.meta[mk.TORCH_VAL].device.type != device:
                continue
            last = at.last_bw_use([p.name])
            if compat.tangents_held_to_the_end():  # until the backward returns (torch 2.11)
                last = at.end - 1
            sweep.add(
                at.nf, at.nf if last is None else max(at.nf, last), "temporaries", p.meta["val"]
            )
    return saved


def _rng_state_inputs(saved: Sequence, bw: torch.fx.GraphModule) -> dict[str, str]:
    """Forward RNG states saved for a seeded recompute (:func:`memopt.facts.is_rng_state`) ->
    their backward placeholders, which the partitioner names ``rng_state_output_<i>``, one
    per state in the order of the forward's outputs."""
    states = [n.name for n in saved if isinstance(n, torch.fx.Node) and is_rng_state(n)]
    inputs = [
        p.name
        for p in bw.graph.nodes
        if p.op == "placeholder" and p.name.startswith("rng_state_output_")
    ]
    return dict(zip(states, inputs)) if len(states) == len(inputs) else {}


def _sweep_backward(bw, at: _Positions, sweep, device, static: Collection[int]) -> sympy.Expr:
    """Backward values: the parameters' gradients (the outputs at ``static`` positions: the
    backward returns one per forward input) live to the optimizer step; returns their bytes.
    An input's gradient (an activation an earlier region handed over a graph break) is that
    region's to read: a temporary here, to the end of this backward. Without ``static`` every
    output counts as a gradient."""
    bw_out = bw.graph.output_node()
    outs = list(bw_out.args[0]) if isinstance(bw_out.args[0], tuple | list) else []
    params = {outs[i] for i in static if i < len(outs) and isinstance(outs[i], torch.fx.Node)}
    grads = sympy.Integer(0)
    for n in at.bw_ops:
        if not _owns(n, device):
            continue
        users = _alias_users(n)
        if any(u is bw_out for u in users):
            if static and not params & {n, *users}:
                sweep.add(at.bpos[n], at.end, "temporaries", n.meta["val"])
                continue
            sweep.add(at.bpos[n], at.end, "gradients", n.meta["val"])
            grads += tensor_bytes_expr(n.meta[mk.TORCH_VAL])
        elif _must_exist(n, users):
            last = at.bread.last(users, at.bpos[n])
            if _recomputed(n) and not fusible(n) and at.reused_at(n, last):
                last -= 1  # a kernel writes its output into the recomputed buffer
            sweep.add(_start(n, at.bpos), last, "temporaries", n.meta["val"])
    return grads


def _recomputed(node: torch.fx.Node) -> bool:
    """A forward value the backward recomputes (tagged by memopt's recompute rewrite or by
    torch's activation checkpointing): the budget planner models its in-place reuse."""
    return node.meta.get(mk.TORCH_RECOMPUTE) is not None


def _nbytes(node: torch.fx.Node) -> int:
    val = node.meta.get(mk.TORCH_VAL)
    if not isinstance(val, torch.Tensor):
        return 0
    return compat.int_hint(val.numel()) * val.element_size()


def step_profile(
    fw: torch.fx.GraphModule,
    bw: torch.fx.GraphModule,
    num_fwd_outputs: int,
    symbols: SymbolTable,
    static_input_indices: Collection[int] = (),
    device: str | None = None,
    pad_matmuls: bool = False,
    fused: Sequence[tuple[str, int]] = (),
    activation_inputs: Sequence[int] = (),
) -> StepProfile:
    """The live-bytes profile of a partitioned step (see the module docstring).

    ``static_input_indices``: positions of the forward's inputs that are parameters or buffers
    (Inductor's ``static_lifetime_input_indices``); the other inputs count as ``inputs``.
    ``device``: the traced device type; tensors elsewhere are not counted. ``pad_matmuls``:
    charge the padded operand copies Inductor makes for unaligned matmuls on CUDA. ``fused``:
    ``(backward node, bytes)`` that Inductor's fusion of a recompute with the backward kernels
    reading its inputs makes at that kernel (the budget planner's ``Candidate.fused_charges``
    of the recomputes it chose; no FX node shows them), charged there at these sizes.
    ``activation_inputs``: per forward input, whether an earlier region made it (autograd's
    activation, handed over a graph break): not the user's input but an activation, live in
    this region's phases and, where this region saves it, in the others' too."""
    from memopt.passes.pipeline import saved_input_bytes

    at = _Positions(fw, bw)
    sweep = _Sweep(symbols)
    saved = _sweep_forward(fw, bw, num_fwd_outputs, at, sweep, device)
    grads = _sweep_backward(bw, at, sweep, device, static_input_indices)
    by_name = {n.name: n for n in at.bw_ops}
    for name, nbytes in fused:
        if name in by_name:
            pos = at.bpos[by_name[name]]
            sweep.items.append((pos, pos, "temporaries", nbytes, sympy.Integer(nbytes)))
    if pad_matmuls and not pads_in_graph(fw):  # on CUDA the pads are nodes of the graph
        for ops, pos in ((at.fw_ops, at.fpos), (at.bw_ops, at.bpos)):
            for operand, factor, first, last in padded_copies(ops, pos):
                sweep.add_scaled(first, last, "temporaries", operand.meta["val"], factor)
    static = set(static_input_indices)
    placeholders = [p for p in fw.graph.nodes if p.op == "placeholder"]
    handed = [
        i < len(activation_inputs) and bool(activation_inputs[i]) for i in range(len(placeholders))
    ]
    inputs, held = sympy.Integer(0), sympy.Integer(0)
    for i, p in enumerate(placeholders):
        if i not in static and _is_tensor(p):
            nbytes = tensor_bytes_expr(p.meta[mk.TORCH_VAL])
            inputs, held = (inputs, held + nbytes) if handed[i] else (inputs + nbytes, held)
    held = symbols.readable(held)
    nf, end = at.nf, at.end
    top_end, bottom_start = _layer_bounds(at.bw_ops)
    phases = {}
    for name, (lo, hi) in (
        ("forward", (0, max(nf - 1, 0))),
        ("backward_start", (nf, max(nf + bottom_start - 1, nf))),
        ("backward_end", (min(nf + top_end, end), end)),
    ):
        first, *others = sweep.peaks(lo, hi)
        phases[name] = first
        phases.update({f"{name}{ALT}{i}": p for i, p in enumerate(others, 1)})
    if held != 0:  # the handed activations, live while this region runs
        phases = {k: replace(v, activations=v.activations + held) for k, v in phases.items()}
        saved += saved_input_bytes(fw, num_fwd_outputs, handed, symbols)
    return StepProfile(
        phases=phases,
        saved=symbols.readable(saved),
        gradients=symbols.readable(grads),
        inputs=symbols.readable(inputs),
    )


def _is_tensor(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get(mk.TORCH_VAL), torch.Tensor)


def _layer_bounds(bw_ops: list[torch.fx.Node]) -> tuple[int, int]:
    """``(end of the first layer's backward, start of the last layer's backward)`` as op
    indices; half the backward twice when fewer than two layers are tagged.

    The backward visits the layers in reverse, but a few ops of a layer can sit elsewhere
    (recomputes issued early), so each layer is placed at the median index of its ops and the
    bounds fall halfway between the medians of neighbouring layers."""
    where: dict[int, list[int]] = {}
    for i, n in enumerate(bw_ops):
        layer = n.meta.get(mk.LAYER)
        if isinstance(layer, int):
            where.setdefault(layer, []).append(i)
    if len(where) < 2:
        return len(bw_ops) // 2, len(bw_ops) // 2
    medians = sorted(sorted(v)[len(v) // 2] for v in where.values())
    return (medians[0] + medians[1]) // 2, (medians[-2] + medians[-1]) // 2
