"""The device memory of a compiled graph as Inductor planned it: plain data and arithmetic.

:func:`memopt._torch_compat.inductor_plan.wrapper_plans` reads, for each graph Inductor
generates code for, the buffers its wrapper allocates, reuses, aliases and deletes in order
(:class:`GraphBuffers`). Unlike the planner's FX-level model (:mod:`memopt.memory_rules`),
this is what the generated code does: which values fuse away, which kernels write in place,
and which dead buffers wait in Inductor's reuse pool for a later allocation of their size.
:func:`replay` turns the events into the graph's live bytes; :func:`step_peaks` combines a
region's forward and backward into the peak of a step.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: the CUDA caching allocator's rounding of every block (``max_memory_allocated`` counts it)
CUDA_ROUND = 512


@dataclass(frozen=True)
class Event:
    """One line of the wrapper's memory plan."""

    kind: str
    """``alloc`` (a new storage of ``nbytes``), ``alias`` (``name`` now refers to ``of``'s
    storage), ``free`` (``name`` is deleted; its storage goes when no name refers to it) or
    ``pool`` (``name`` is dead and its storage waits in the reuse pool for the ``alias`` that
    reuses it: live meanwhile)."""
    name: str
    nbytes: int = 0
    of: str | None = None
    kernel: bool = False
    """Allocated by an extern kernel as it runs (a fallback op's output), not by the wrapper."""
    origin: str = ""
    """For an ``alloc`` (or the ``alias`` of a reuse): the FX node whose value the buffer
    holds (the last of the kernel's origins in graph order), "" when not known."""


@dataclass(frozen=True)
class GraphBuffers:
    """Inductor's buffer plan of one compiled graph."""

    backward: bool
    device: str
    inputs: Mapping[str, int]
    """Graph input name to its bytes (the layout's storage)."""
    events: tuple[Event, ...]
    outputs: tuple[str | None, ...]
    """The wrapper's names of the graph outputs (None for a non-tensor output)."""
    fx_outputs: tuple[str | None, ...] = ()
    """The FX output node's argument names, in the same order."""
    nodes: tuple[str, ...] = ()
    """The names of the ops of the FX graph Inductor lowered (post-grad; no placeholders), in
    order."""
    module: Any = field(default=None, compare=False, repr=False)
    """The FX GraphModule Inductor lowered (post-grad), to tell which outputs alias inputs."""


@dataclass(frozen=True)
class Replay:
    """Live bytes of one graph over its plan, counting the inputs given and what it allocates."""

    entry: int
    """Counted input bytes at the start."""
    peak: int
    peak_event: int
    """Index of the event at the peak (-1: the entry)."""
    end: int
    """Counted bytes still live when the graph returns (its outputs, inputs held)."""
    peak_names: tuple[str, ...] = ()
    """Names whose storages are live at the peak, largest first (at most 12)."""
    outputs: tuple[tuple[object, int] | None, ...] = ()
    """Per graph output (as ``GraphBuffers.outputs``): its storage key and bytes, None for an
    output that is a static input or an alias of one."""


def _round(n: int, to: int) -> int:
    return -(-n // to) * to if to > 1 else n


def replay(
    gb: GraphBuffers,
    counted_inputs: Mapping[str, tuple[str, int]] | None = None,
    held: frozenset[str] = frozenset(),
    round_to: int = 1,
    pooled: bool = True,
) -> Replay:
    """Live bytes over ``gb``'s plan. ``counted_inputs``: input name to (storage key, bytes)
    for inputs the graph's memory includes (inputs sharing a storage share a key); every other
    input is static (counted outside, never freed here). ``held``: storage keys something
    outside the graph keeps alive (a ``del`` frees nothing). The storage an allocation makes
    is keyed ``("buf", event index)``, made unique against the inputs' keys: a backward's saved
    inputs carry their forward's keys, and a shared key would merge two storages' counts.
    ``pooled=False``: a storage waiting in the reuse pool is not counted until its reuse (what
    the plan would hold if a dead buffer were freed at once and its reuser allocated anew)."""
    counted_inputs = counted_inputs or {}
    storage_of: dict[str, object] = {}
    size: dict[object, int] = {}
    refs: dict[object, int] = {}
    first: dict[object, str] = {}  # a storage's first name (for the names at the peak)
    for name, (key, nbytes) in counted_inputs.items():
        storage_of[name] = key
        size[key] = _round(nbytes, round_to)
        refs[key] = refs.get(key, 0) + 1
        first.setdefault(key, name)
    live_keys = set(size)
    live = sum(size.values())
    waiting: set[object] = set()  # pooled storages not counted (pooled=False)

    def top() -> tuple[str, ...]:
        keys = sorted(live_keys, key=lambda k: (-size[k], first[k]))[:12]
        return tuple(f"{first[k]}:{size[k]}" for k in keys)

    entry, peak, peak_at, peak_names = live, live, -1, top()

    def drop(name: str) -> None:
        nonlocal live
        key = storage_of.pop(name, None)
        if key is None:
            return
        refs[key] -= 1
        if refs[key] == 0 and key not in held and key not in waiting:
            live -= size[key]
            live_keys.discard(key)

    for i, ev in enumerate(gb.events):
        if ev.kind == "alloc":
            drop(ev.name)  # a name rebound (never in Inductor's plans; safe)
            key: tuple = ("buf", i)
            while key in size:  # an input's storage already has this key
                key = (*key, "+")
            storage_of[ev.name], size[key], refs[key] = key, _round(ev.nbytes, round_to), 1
            first[key] = ev.name
            live_keys.add(key)
            live += size[key]
            if live > peak:
                peak, peak_at, peak_names = live, i, top()
        elif ev.kind == "alias":
            key = storage_of.get(ev.of) if ev.of is not None else None
            if key is None:
                continue  # an alias of a static input: nothing counted
            drop(ev.name)
            storage_of[ev.name] = key
            refs[key] += 1
            if key in waiting:  # reused from the pool: counted again from here
                waiting.discard(key)
                live_keys.add(key)
                live += size[key]
                if live > peak:
                    peak, peak_at, peak_names = live, i, top()
        elif ev.kind == "pool":
            key = storage_of.get(ev.name)
            if not pooled and key is not None and key in live_keys and key not in held:
                waiting.add(key)
                live_keys.discard(key)
                live -= size[key]
        elif ev.kind == "free":
            drop(ev.name)
    out_keys = {storage_of[o] for o in gb.outputs if o is not None and o in storage_of}
    end = sum(size[k] for k in out_keys | {k for k in held if k in size})
    outs = tuple(
        (storage_of[o], size[storage_of[o]]) if o is not None and o in storage_of else None
        for o in gb.outputs
    )
    return Replay(entry, peak, peak_at, end, peak_names, outs)


@dataclass(frozen=True)
class StepPeaks:
    """A region's forward and backward as Inductor planned them, on top of ``static``."""

    static: int
    fwd: Replay
    bwd: Replay

    @property
    def fwd_peak(self) -> int:
        return self.static + self.fwd.peak

    @property
    def bwd_peak(self) -> int:
        return self.static + self.bwd.peak

    @property
    def peak(self) -> int:
        return max(self.fwd_peak, self.bwd_peak)


def step_peaks(
    fw: GraphBuffers,
    bw: GraphBuffers,
    static: int,
    *,
    tangents_held: bool,
    round_to: int = 1,
    pooled: bool = True,
    inputs_copied: bool = False,
) -> StepPeaks:
    """The forward's and the backward's peaks of one region. ``static``: bytes live through
    the step outside the graphs' own buffers (parameters, the batch, earlier regions' saved
    tensors). The forward's inputs are static. The backward's inputs that the forward made
    (saved tensors) are counted with the forward's storage (views of one buffer share it) and
    freed at their ``del``; saved aliases of forward inputs are static; the other inputs
    (tangents: autograd's incoming gradients) are counted, and held to the end where autograd
    holds them (``tangents_held``). ``pooled``: as :func:`replay`'s. ``inputs_copied`` (CUDA
    graphs): each tangent also has a copy in the graph's pool, live through the backward."""
    f = replay(fw, round_to=round_to, pooled=pooled)
    made, static_names = {}, set()
    for name, i in saved_outputs(fw, bw).items():
        if f.outputs[i] is None:
            static_names.add(name)
        else:
            made[name] = f.outputs[i]
    counted: dict[str, tuple[str, int]] = {}
    held: set[object] = set()
    for name, nbytes in bw.inputs.items():
        if name in made:
            key, size = made[name]
            counted[name] = (key, size)
        elif name in static_names or name in fw.inputs:
            continue
        else:
            counted[name] = (("input", name), nbytes)
            if tangents_held:
                held.add(("input", name))
            if inputs_copied:  # no event names it: live to the end
                counted[f"{name} (graph pool copy)"] = (("pool copy", name), nbytes)
                held.add(("pool copy", name))
    b = replay(bw, counted, frozenset(held), round_to=round_to, pooled=pooled)
    return StepPeaks(static, f, b)


def saved_made_bytes(fw: GraphBuffers, bw: GraphBuffers) -> int:
    """Bytes of the storages ``fw`` allocates that ``bw`` reads: the activations the region
    saves for its backward as Inductor compiled them (views of one buffer once; saved forward
    inputs, parameters among them, not counted). The graph-level estimate counts a saved view
    at its base's storage, where Inductor may store the view as a buffer of its own."""
    f = replay(fw)
    outs = (f.outputs[i] for i in saved_outputs(fw, bw).values())
    return sum(dict(o for o in outs if o is not None).values())


def saved_outputs(fw: GraphBuffers, bw: GraphBuffers) -> dict[str, int]:
    """Each backward input the forward returns: its name to the forward's output position.
    Mostly by name (the partitioner names a saved tensor alike in both graphs), else by
    position next to a name that matches: Inductor's post-grad passes may replace a saved
    forward node, whose backward input keeps the old name (on CUDA the cross-entropy's
    ``amax`` becomes a ``getitem`` of the online softmax's reduction)."""
    where = {n: i for i, n in enumerate(fw.fx_outputs) if n is not None}
    names = list(bw.inputs)
    got = {n: where[n] for n in names if n in where}
    taken = set(got.values())
    for j, name in enumerate(names):
        if name in got or name.startswith("tangents"):  # autograd's incoming gradients
            continue
        near = [(abs(k - j), k) for k, other in enumerate(names) if other in got]
        if not near:
            continue
        k = min(near)[1]
        i = got[names[k]] + j - k
        if 0 <= i < len(fw.fx_outputs) and i not in taken and fw.fx_outputs[i] not in bw.inputs:
            if fw.fx_outputs[i] is not None and i < len(fw.outputs) and fw.outputs[i]:
                got[name] = i
                taken.add(i)
    return got


#: FX node names a section keeps from a peak's kernel on (where the planner's op is found)
PEAK_NODES = 24


def peak_nodes(gb: GraphBuffers, event: int) -> tuple[str, ...]:
    """Where event ``event`` (a replay's peak) happens, as the graph's FX node names from the
    node whose value that event's buffer holds, :data:`PEAK_NODES` of them (the planner's
    graph lacks some of Inductor's post-grad nodes: the first it has is the position). A
    buffer of no known node: from the earliest node of the allocations next to it (a kernel's
    outputs are allocated together before it runs). The graph's first ops for the entry
    (-1); () where nothing is known."""
    if not gb.nodes or event >= len(gb.events):
        return ()
    order = {n: i for i, n in enumerate(gb.nodes)}
    if event < 0:
        return gb.nodes[:PEAK_NODES]
    ev = gb.events
    at = order.get(ev[event].origin)
    if at is None:
        lo = hi = event
        while lo > 0 and ev[lo - 1].kind in ("alloc", "alias"):
            lo -= 1
        while hi + 1 < len(ev) and ev[hi + 1].kind in ("alloc", "alias"):
            hi += 1
        at = min((order[e.origin] for e in ev[lo : hi + 1] if e.origin in order), default=None)
    return () if at is None else gb.nodes[at : at + PEAK_NODES]


def pair(graphs: list[GraphBuffers]) -> tuple[GraphBuffers, GraphBuffers] | None:
    """A region's forward and backward among the graphs one compile generated: the last
    backward, and the forward that made most of its saved inputs (the last on a tie)."""
    bws = [g for g in graphs if g.backward]
    fws = [g for g in graphs if not g.backward]
    if not bws or not fws:
        return None
    bw = bws[-1]
    need = set(bw.inputs)
    return max(reversed(fws), key=lambda g: len(need & set(g.fx_outputs))), bw


def section(
    graphs: list[GraphBuffers],
    *,
    tangents_held: bool,
    cuda_graphs: bool = False,
    model_peak: int | None = None,
    workspaces: tuple[int, int] = (0, 0),
) -> dict[str, Any] | None:
    """The region report's ``inductor`` section: the region's peaks as Inductor planned its
    buffers, on its own inputs and parameters (what earlier regions of the step hold is the
    step's, not the region's: identical layers get identical sections), next to the
    planner's model (``model_peak``, the step's prediction where earlier regions hold bytes)
    when a budget planned it, and with the step's cuBLAS workspaces (``(count, bytes each)``,
    held outside every graph). ``cuda_graphs``: the region runs as CUDA graphs (each tangent
    also copied into their pool: :func:`step_peaks`). None without both graphs."""
    from memopt.symbolic import fmt_bytes

    fb = pair(graphs)
    if fb is None:
        return None
    fw, bw = fb
    round_to = CUDA_ROUND if fw.device == "cuda" else 1
    static = sum(_round(n, round_to) for n in fw.inputs.values())
    kw = {"tangents_held": tangents_held, "round_to": round_to, "inputs_copied": cuda_graphs}
    sp = step_peaks(fw, bw, static, **kw)
    # what the reuse pool adds: dead buffers held until a later buffer of their size reuses them
    unpooled = step_peaks(fw, bw, static, pooled=False, **kw)
    phase = "forward" if sp.fwd_peak >= sp.bwd_peak else "backward"
    text = (
        f"Inductor's buffer plan: peak {fmt_bytes(sp.peak)} in the {phase} (forward "
        f"{fmt_bytes(sp.fwd_peak)}, backward {fmt_bytes(sp.bwd_peak)}; inputs and parameters "
        f"{fmt_bytes(static)}"
    )
    if model_peak is not None:
        text += f"; the planner's model predicted {fmt_bytes(model_peak)}"
    count, each = workspaces
    ws = count * each
    text += ")"
    if ws:
        text += (
            f". With the step's cuBLAS workspaces ({count} x {fmt_bytes(each)}, outside the "
            f"graphs): {fmt_bytes(sp.peak + ws)}"
        )
    text += (
        ". Not counted: what no graph allocates otherwise (cuDNN workspaces, the optimizer); "
        "measure the step to see them."
    )
    text = textwrap.fill(text, width=100)  # the report keeps to 120 columns
    return {
        "peak": sp.peak,
        "fwd_peak": sp.fwd_peak,
        "bwd_peak": sp.bwd_peak,
        "static": static,
        "peak_unpooled": unpooled.peak,
        "saved_made": saved_made_bytes(fw, bw),
        "model_peak": model_peak,
        "workspaces": ws,
        "fwd_at_peak": list(sp.fwd.peak_names),
        "bwd_at_peak": list(sp.bwd.peak_names),
        "fwd_peak_nodes": list(peak_nodes(fw, sp.fwd.peak_event)),
        "bwd_peak_nodes": list(peak_nodes(bw, sp.bwd.peak_event)),
        "text": text,
    }


def compiled_errors(
    runs: Sequence[tuple[int, Mapping[str, Any] | None, int | None, int | None]],
) -> dict[int, tuple[int, bool]]:
    """The planner's model against what Inductor compiled, per region of a step: ``runs``
    holds, per run, ``(region, its compiled plan's inductor section, the model's peak of that
    plan, the byte budget the model fitted it to or None)``. Returns, for each region where a
    compiled plan peaks above its model, the largest such excess and whether that plan's
    Inductor peak passes its budget."""
    out: dict[int, tuple[int, bool]] = {}
    for region, sec, model, budget in runs:
        peak = (sec or {}).get("peak")
        if peak is None or model is None or peak <= model:
            continue
        excess, over = out.get(region, (0, False))
        out[region] = max(excess, peak - model), over or (budget is not None and peak > budget)
    return out
