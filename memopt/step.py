"""The step plan: one budget for a training step that runs several compiled regions.

Plain data in, plain data out (no FX, no torch). A step runs its regions' forwards in order and
their backwards in reverse; a compiled region may run several times per step (one graph for
every layer of a stack). Region ``r`` offers a *menu* of plans, each solved by the one-region
planner (:func:`memopt.planner.solve`) at a share of its saved bytes: the plan strings, the
sync dict, the region's own predicted peak, the activation bytes it leaves saved and its
predicted overhead. The step model::

    peak(step) = max over invocations i of  held(i) + peak_r(i)
    held(i)    = saved bytes left by the invocations before i (their forwards ran, their
                 backwards have not)

``peak_r`` already holds what region ``r`` needs alive while it runs (its inputs, its own saved
tensors, its forward and backward temporaries). With one region this is the one-region
planner's peak, so a budget means the same for one region or forty. :func:`choose` picks one
menu entry per compiled region (every invocation of a region runs the same compiled plan) at
the least total overhead whose step peak fits.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from memopt.step_exact import exact_limited, exact_runs
from memopt.step_layers import (
    OffloadChoice,
    StepTiming,
    kept_tensors,
    layer_runs,
    offload_choice,
    offload_overhead,
    offload_times,
)

__all__ = ["layer_runs"]  # re-exported (memopt.step_layers)

#: Up to this many combinations of the regions' options are all tried (exact for the models).
EXACT_COMBINATIONS = 20_000

#: Shares of a region's saved bytes at which its menu is solved (1.0: keep everything).
MENU_SHARES: tuple[float, ...] = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)

MEASURED_MARGIN = 0.005
"""Once a step's peak was measured, a byte budget's target is the budget less this share (the
run-to-run spread of the allocator's peak), instead of the blind CUDA reserve."""
RELAX_ROOM = 0.02
"""A measured step peak this share of the budget (or more) under the measured target means the
model over-predicted the plan (BERT at 3 GB: a corrected plan measured 8-10% under): the step is
planned once more with that miss as a negative correction, so the plan spends the room on less
recompute. Below it, a recompile buys too little. A judgment, not fitted to a model."""

INFEASIBLE_TIE = 0.001
"""When no plan fits, step peaks this share of the target apart are equals, and the cheaper
plan wins: the model cannot tell them apart (Mistral at torch's 0.1 point on an H200 took a
smallest-peak plan predicted 100 KB under a measured one, for 13 ms more a step; docs/zoo.md,
forty-fourth session). A judgment, not fitted."""


def better(a: tuple[bool, float, int], b: tuple[bool, float, int], target: int) -> bool:
    """Whether step plan ``a`` beats ``b``, each ``(fits, overhead_s, peak)``: one that fits
    beats one that does not; of two that fit, the cheaper; of two that do not, the lower peak,
    but peaks within :data:`INFEASIBLE_TIE` of the target are equals and the cheaper wins."""
    if a[0] != b[0] or a[0]:
        return a[0] if a[0] != b[0] else a[1] < b[1]
    if abs(a[2] - b[2]) > int(INFEASIBLE_TIE * target):
        return a[2] < b[2]
    return (a[1], a[2]) < (b[1], b[2])


def measured_target(budget: int) -> int:
    """A byte budget's target once the step's peak was measured."""
    return budget - int(MEASURED_MARGIN * budget)


def leaves_room(budget: int, measured: int, target: int | None) -> bool:
    """Whether a step measured at ``measured`` leaves room under the measured target worth a
    re-plan: more than MEASURED_MARGIN of the budget for a plan made on the blind CUDA reserve
    (``target`` under the measured target; world 2: an exact prediction left 2.6-2.9% unused,
    docs/benchmarks.md, seventeenth session), else RELAX_ROOM."""
    room = measured_target(budget) - measured
    if target is not None and target < measured_target(budget):
        return room > int(MEASURED_MARGIN * budget)
    return room >= int(RELAX_ROOM * budget)


@dataclass(frozen=True)
class Option:
    """One plan for one compiled region."""

    plans: tuple[str, ...]
    """Plan strings (``ClusterId:Strategy:Count``)."""
    sync: Mapping[int, tuple] = field(default_factory=dict)
    """The region's sync dict (offload within the region's own layers)."""
    peak: int = 0
    """The region's predicted peak while it runs, held bytes of other regions excluded."""
    saved: int = 0
    """Activation bytes the region leaves on the device from its forward to its backward."""
    overhead_s: float = 0.0
    """Predicted extra seconds per invocation."""
    label: str = ""
    saved_inputs: int = 0
    """Of ``saved``, graph inputs that are activations of earlier regions (a step offload of
    the run leaves them: they are the call's inputs)."""
    decisions: Mapping[str, object] = field(default_factory=dict, compare=False)
    """The plan's non-keep decision per candidate of the region's planning problem (the model
    of the plan at each position: :mod:`memopt.step_excess`)."""

    @property
    def movable(self) -> int:
        """Bytes a step offload of the run moves to the host (its saved graph inputs stay)."""
        return self.saved - self.saved_inputs

    def key(self) -> tuple:
        """What a compile depends on: the plan strings and the sync dict."""
        sync = tuple(sorted((int(k), tuple(v)) for k, v in self.sync.items()))
        return tuple(sorted(self.plans)), sync

    def describe(self) -> str:
        from memopt.format import short_plan_strings
        from memopt.symbolic import fmt_bytes

        return (
            f"{self.label or 'plan'}: peak {fmt_bytes(self.peak)} while it runs, "
            f"{fmt_bytes(self.saved)} saved for backward, predicted overhead "
            f"{self.overhead_s * 1e3:.3f} ms per run; plan: "
            + (",".join(short_plan_strings(self.plans)) or "(keep)")
            + (f"; sync {dict(self.sync)}" if self.sync else "")
        )

    def to_dict(self) -> dict:
        return {
            "plans": list(self.plans),
            "sync": {str(k): list(v) for k, v in self.sync.items()},
            "peak": self.peak,
            "saved": self.saved,
            "overhead_s": self.overhead_s,
            "label": self.label,
        }


def region_menu(problem, rates, saved_inputs: int = 0, max_depth: int = 2) -> list[Option]:
    """A region's menu: at each share of :data:`MENU_SHARES` the one-region planner's fastest
    plan whose own peak fits that share (``memopt.planner.resolve_budget``), and its fastest
    plan that leaves at most that share of the saved bytes for the backward (what later
    regions feel). Entry 0 keeps everything the user did not ask to change; the last is the
    smallest peak found. ``saved_inputs``: bytes of saved graph inputs that are activations
    of earlier regions (held whatever the plan). ``max_depth``: the region's chain rule."""
    from functools import partial

    from memopt.planner import resolve_budget
    from memopt.planner import solve as planner_solve
    from memopt.planner.problem import derived
    from memopt.planner.solver import descending

    solve = partial(planner_solve, max_recompute_depth=max_depth, restart_work=MENU_RESTARTS)
    held = derived(problem, "held", lambda: held_problem(problem))
    mark = held.timeline.fwd_live_bytes[-1]
    keep = problem.saved_bytes_baseline()
    at_peak = descending(lambda b: solve(problem, b, rates))  # shares in descending order
    at_saved = descending(lambda b: solve(held, b, rates, leads=[None]))
    out = []
    for share in MENU_SHARES:
        sol = at_peak(resolve_budget(share, problem))
        out.append(_option(sol, sol.predicted_peak, f"peak share {share:g}"))
        if share < 1.0:
            sol = at_saved(mark + int(share * keep))
            out.append(_option(sol, _peak(problem, sol), f"saved share {share:g}"))
    sol = at_peak(0)
    out.append(_option(sol, sol.predicted_peak, "smallest peak"))
    every = derived(problem, "recompute all", lambda: recompute_all(problem))
    if every is not None:
        sol = solve(every, 2**62, rates, leads=[None])
        out.append(_option(sol, sol.predicted_peak, "recompute all"))
    return [replace(o, saved=o.saved + saved_inputs, saved_inputs=saved_inputs) for o in out]


def exact_option(
    problem, rates, budget: int, saved_inputs: int = 0, max_depth: int = 2
) -> Option | None:
    """The one-region planner's fastest plan whose own peak fits ``budget`` bytes (None when
    none does): an option between the menu's coarse shares."""
    from memopt.planner import solve
    from memopt.symbolic import fmt_bytes

    sol = solve(problem, budget, rates, max_recompute_depth=max_depth)
    if sol.predicted_peak > budget:
        return None
    o = _option(sol, sol.predicted_peak, f"fits {fmt_bytes(budget)}")
    return replace(o, saved=o.saved + saved_inputs, saved_inputs=saved_inputs)


#: Room under a step plan's target, as a share of it, worth solving finer options for; the
#: menus' greedy restarts (``restart_work``): none, the options run get them (finer_menus).
FINER_MIN_ROOM, MENU_RESTARTS = 0.002, 0


def finer_menus(
    sequence: Sequence[int],
    menus: Mapping[int, Sequence[Option]],
    choice: StepChoice,
    solve_at,
) -> dict[int, list[Option]] | None:
    """The menus plus, per region and option the ``choice`` runs, the plan solved (with the
    greedy's restarts) at that option's peak plus the room the choice leaves under its target
    (``solve_at(region, budget) -> Option | None``): the menu's shares are coarse (at world 2
    a step plan left 1.4-1.9% of its budget unused, docs/benchmarks.md, seventeenth session).
    None without a fitting choice; ``choice.chosen`` is keyed by run."""
    room = choice.target - choice.peak
    if not choice.feasible:
        return None
    room = room if room > FINER_MIN_ROOM * choice.target else 0
    out = {r: list(m) for r, m in menus.items()}
    done: set[tuple] = set()
    for i, r in enumerate(sequence):
        o = choice.chosen.get(i)
        if o is None or (r, o.key()) in done:
            continue
        done.add((r, o.key()))
        new = solve_at(r, o.peak + room)
        if new is not None and all(new.key() != x.key() for x in out[r]):
            out[r].append(new)
    return out


def recompute_all(problem):
    """The problem with every recomputable cluster fixed to recompute (level 1's plan, which
    the search may not reach on its own); None when nothing is recomputable."""
    from memopt.planner import PlanningProblem

    fixed = dict(problem.fixed)
    for cid, cands in problem.clusters.items():
        if cid not in fixed and all(c.recomputable and not c.compromise_only for c in cands):
            fixed[cid] = (1, -1)
    if fixed == dict(problem.fixed):
        return None
    return PlanningProblem(candidates=problem.candidates, timeline=problem.timeline, fixed=fixed)


def held_problem(problem):
    """The problem with one more forward position, of no time, where nothing but the saved
    tensors and a mark larger than any other position's bytes is live: its peak is the mark
    plus the bytes the forward leaves for the backward."""
    from memopt.planner import PlanningProblem

    tl = problem.timeline
    mark = max(tl.base_bytes, default=0) + sum(c.nbytes for c in problem.candidates) + 1
    timeline = replace(
        tl,
        fwd_op_s=(*tl.fwd_op_s, 0.0),
        fwd_live_bytes=(*tl.fwd_live_bytes, mark - tl.static_bytes),
        fwd_op_names=(*tl.fwd_op_names, "<end of forward>") if tl.fwd_op_names else (),
    )
    return PlanningProblem(candidates=problem.candidates, timeline=timeline, fixed=problem.fixed)


def _peak(problem, sol) -> int:
    from memopt.planner import memory_profile

    return memory_profile(problem, sol.decisions).peak


def _option(sol, peak: int, label: str) -> Option:
    return Option(
        plans=tuple(sol.plan_strings),
        sync=dict(sol.sync),
        peak=peak,
        saved=sol.saved.on_device,
        overhead_s=sol.time.overhead_s,
        label=label,
        decisions=dict(sol.decisions),
    )


def pareto(options: Sequence[Option]) -> tuple[Option, ...]:
    """The options no other option beats on overhead, peak and saved bytes at once, by
    increasing overhead (the first keeps the most)."""
    out: list[Option] = []
    for o in sorted(options, key=lambda o: (o.overhead_s, o.peak, o.saved, o.plans)):
        dominated = any(
            p.overhead_s <= o.overhead_s and p.peak <= o.peak and p.saved <= o.saved for p in out
        )
        if not dominated:
            out.append(o)
    return tuple(out)


def step_terms(
    sequence: Sequence[int],
    chosen: Mapping[int, Option],
    offsets: Sequence[int] | None = None,
    away: Mapping[int, frozenset[int]] | None = None,
) -> list[int]:
    """Per invocation, the bytes the step model predicts while it runs: what earlier runs hold
    (less those away), its own peak and its offset. ``offsets``: bytes outside every region's
    model while each run runs (parameters of other layers, optimizer states, the batch, and the
    measured corrections), measured. ``away``: per run, the offloaded runs whose saved tensors
    are on the host meanwhile (:func:`memopt.step_layers.offload_choice`; ``chosen`` is then
    keyed by run)."""
    held, out = 0, []
    for i, r in enumerate(sequence):
        o = chosen[r]
        gone = away.get(i, ()) if away else ()
        moved = sum(chosen[j].movable for j in gone)
        out.append(held - moved + o.peak + (offsets[i] if offsets else 0))
        held += o.saved
    return out


def step_peak(
    sequence: Sequence[int],
    chosen: Mapping[int, Option],
    offsets: Sequence[int] | None = None,
    away: Mapping[int, frozenset[int]] | None = None,
) -> tuple[int, int | None]:
    """Predicted peak of the step (the largest of :func:`step_terms`) and the position (in
    ``sequence``) of the invocation that holds it (None for an empty step)."""
    best, where = 0, None
    for i, here in enumerate(step_terms(sequence, chosen, offsets, away)):
        if where is None or here > best:
            best, where = here, i
    return best, where


def step_overhead(sequence: Sequence[int], chosen: Mapping[int, Option]) -> float:
    counts = Counter(sequence)
    return sum(chosen[r].overhead_s * n for r, n in counts.items())


def step_saved(sequence: Sequence[int], chosen: Mapping[int, Option]) -> int:
    return sum(chosen[r].saved for r in sequence)


def fraction_target(
    fraction: float, sequence: Sequence[int], menus: Mapping[int, Sequence[Option]]
) -> int:
    """A fractional budget for the step: keep that share of the step's saved bytes,
    ``peak_keep - (1 - f) * saved_keep`` with everything kept (the one-region rule)."""
    keep = {r: _keep(menus[r]) for r in set(sequence)}
    peak, _ = step_peak(sequence, keep)
    return int(peak - (1.0 - fraction) * step_saved(sequence, keep))


@dataclass(frozen=True)
class StepChoice:
    chosen: Mapping[int, Option]
    feasible: bool
    peak: int
    peak_at: int | None
    """Index in the sequence of the invocation that holds the peak."""
    overhead_s: float
    target: int
    saved_before: int
    saved_after: int
    offload: OffloadChoice | None = None
    overhead_floor_s: float | None = None
    """No step plan that fits the target costs less (memopt.step_bounds; ``inf``: none fits;
    None: runs are offloaded across the step, which the bound does not cover)."""
    """Layers the step offloads (the planner's choice), None when none."""


def choose(
    sequence: Sequence[int],
    menus: Mapping[int, Sequence[Option]],
    target: int,
    offsets: Sequence[int] | None = None,
    away: Mapping[int, frozenset[int]] | None = None,
) -> StepChoice:
    """One option per compiled region: the least step overhead whose step peak fits
    ``target``; when none fits, the smallest step peak. Candidates: every uniform share (the
    same menu row for all regions) and a greedy descent that moves, one region at a time, to
    the option with the best peak drop per second of added overhead."""
    regions = sorted(set(sequence))
    fronts = {r: pareto(menus[r]) for r in regions}  # same order as ``regions``

    def peak_of(c: Mapping[int, Option]) -> int:
        return step_peak(sequence, c, offsets, away)[0]

    counts = Counter(sequence)
    tried = [_tighten(counts, fronts, _greedy(counts, fronts, target, peak_of), target, peak_of)]
    if math.prod(len(f) for f in fronts.values()) <= EXACT_COMBINATIONS:
        tried += [dict(zip(regions, combo)) for combo in itertools.product(*fronts.values())]
    for share in range(max(len(menus[r]) for r in regions)):
        tried.append({r: menus[r][min(share, len(menus[r]) - 1)] for r in regions})
    tried.append(
        {r: min(fronts[r], key=lambda o: (o.peak + o.saved, o.overhead_s)) for r in regions}
    )

    scored = [(peak_of(c), step_overhead(sequence, c), c) for c in tried]
    fits = [x for x in scored if x[0] <= target]
    if not fits:  # the smallest peak, the cheapest of those within a tie of it (``better``)
        floor = min(x[0] for x in scored)
        fits = [x for x in scored if x[0] <= floor + int(INFEASIBLE_TIE * target)]
    best = min(fits, key=lambda x: (x[1], x[0]))[2]
    peak, at = step_peak(sequence, best, offsets, away)
    keep = {r: _keep(menus[r]) for r in regions}
    return StepChoice(
        chosen=best,
        feasible=peak <= target,
        peak=peak,
        peak_at=at,
        overhead_s=step_overhead(sequence, best),
        target=target,
        saved_before=step_saved(sequence, keep),
        saved_after=step_saved(sequence, best),
    )


def _keep(menu: Sequence[Option]) -> Option:
    return menu[0]


def _greedy(
    counts: Counter, fronts: Mapping[int, tuple[Option, ...]], target: int, peak_of
) -> dict[int, Option]:
    pos = {r: 0 for r in fronts}
    chosen = {r: fronts[r][0] for r in fronts}
    peak = peak_of(chosen)
    while peak > target:
        best = None
        for r, front in fronts.items():
            for j in range(pos[r] + 1, len(front)):
                trial = {**chosen, r: front[j]}
                p = peak_of(trial)
                if p >= peak:
                    continue
                cost = (front[j].overhead_s - chosen[r].overhead_s) * counts[r]
                ratio = (peak - p) / max(cost, 1e-12)
                if best is None or ratio > best[0]:
                    best = (ratio, r, j, p)
        if best is None:
            break
        _, r, j, peak = best
        pos[r], chosen[r] = j, fronts[r][j]
    return chosen


def _tighten(
    counts: Counter,
    fronts: Mapping[int, tuple[Option, ...]],
    chosen: dict[int, Option],
    target: int,
    peak_of,
) -> dict[int, Option]:
    """Undo what the descent bought but no longer needs: move regions to cheaper options
    while the step still fits (the costliest saving first)."""
    if peak_of(chosen) > target:
        return chosen
    improved = True
    while improved:
        improved = False
        for r in sorted(fronts, key=lambda r: -chosen[r].overhead_s * counts[r]):
            for o in fronts[r]:
                if o.overhead_s >= chosen[r].overhead_s:
                    break
                trial = {**chosen, r: o}
                if peak_of(trial) <= target:
                    chosen, improved = trial, True
                    break
    # a cheaper option of one region may let another region step back too: one more pass of
    # pairwise swaps would be exact for two regions; the uniform rows cover the rest
    return chosen


#: At most this many compiled plans per region (each is a compile); runs beyond take the next
#: more aggressive of them.
MAX_VARIANTS = 3
#: Steps of more runs than this choose per region (every run of a region the same plan): the
#: per-run descent grows with runs squared.
MAX_RUNS_PER_RUN_CHOICE = 24


def choose_runs(
    sequence: Sequence[int],
    menus: Mapping[int, Sequence[Option]],
    target: int,
    offsets: Sequence[int] | None = None,
    away: Mapping[int, frozenset[int]] | None = None,
    exact: bool = True,
) -> StepChoice:
    """One option per *run* (position in ``sequence``): a region that runs once per layer can
    recompute more in some layers than in others, as one graph of all layers can. At most
    :data:`MAX_VARIANTS` distinct plans per region (each is compiled once); the answer is
    never worse than one plan per region, nor (``exact``) than the optimum over the menus
    (:func:`memopt.step_exact.exact_runs`) held to that limit. ``chosen`` maps run positions
    to options."""
    n = len(sequence)
    fronts = {r: pareto(menus[r]) for r in set(sequence)}
    if away:  # the peak depends on which runs are away: plan per run
        runs = choose(range(n), {i: menus[r] for i, r in enumerate(sequence)}, target, offsets,
                      away)  # fmt: skip
        best, tried = None, [dict(runs.chosen)]
    else:
        per_region = choose(sequence, menus, target, offsets)
        best = replace(per_region, chosen={i: per_region.chosen[r] for i, r in enumerate(sequence)})
        if n > MAX_RUNS_PER_RUN_CHOICE:
            return best
        tried = []
        if n != len(set(sequence)):
            runs = choose(range(n), {i: menus[r] for i, r in enumerate(sequence)}, target, offsets)
            tried.append(dict(runs.chosen))
    if exact and n <= MAX_RUNS_PER_RUN_CHOICE:
        optimum = exact_runs(sequence, fronts, target, offsets, away)
        if optimum is not None:  # the optimum over the menus, and held to the variant limit
            tried += [optimum, *exact_limited(sequence, fronts, target, offsets, away, optimum,
                                            MAX_VARIANTS)]  # fmt: skip
    for chosen in (_limit_variants(sequence, c) for c in tried):
        peak, at = step_peak(range(n), chosen, offsets, away)
        cand = replace(
            runs if best is None else best,
            chosen=chosen,
            feasible=peak <= target,
            peak=peak,
            peak_at=at,
            overhead_s=sum(o.overhead_s for o in chosen.values()),
            saved_after=sum(o.saved for o in chosen.values()),
        )
        if best is None or _better(cand, best):
            best = cand
    return best


def _better(a: StepChoice, b: StepChoice) -> bool:
    return better((a.feasible, a.overhead_s, a.peak), (b.feasible, b.overhead_s, b.peak), a.target)


def _limit_variants(sequence: Sequence[int], chosen: dict[int, Option]) -> dict[int, Option]:
    """At most :data:`MAX_VARIANTS` plans per region: keep the most used (and the most
    aggressive one used); move every other run to the cheapest kept plan that saves at least
    as much (a step that fitted still fits)."""
    out = dict(chosen)
    for r in set(sequence):
        pos = [i for i, x in enumerate(sequence) if x == r]
        by_key = {chosen[i].key(): chosen[i] for i in pos}
        used = Counter(chosen[i].key() for i in pos)
        if len(used) <= MAX_VARIANTS:
            continue
        hardest = min(by_key.values(), key=lambda o: (o.saved, o.peak, -o.overhead_s))
        common = [by_key[k] for k, _ in used.most_common() if k != hardest.key()]
        kept = [hardest, *common[: MAX_VARIANTS - 1]]
        for i in pos:
            o = chosen[i]
            if o in kept:
                continue
            ok = [k for k in kept if k.saved <= o.saved and k.peak <= o.peak]
            out[i] = min(ok, key=lambda k: k.overhead_s) if ok else hardest
    return out


#: The step planner tries offloading the first k layers for k up to this many, and solves the
#: exact choice for this many of them (the best by the descent).
MAX_OFFLOAD_LAYERS, EXACT_OFFLOADS = 8, 2


def choose_with_offload(
    sequence: Sequence[int],
    menus: Mapping[int, Sequence[Option]],
    target: int,
    offsets: Sequence[int] | None,
    layers: Sequence[Sequence[int]],
    timing: StepTiming | None,
    away: Mapping[int, frozenset[int]] | None = None,
) -> StepChoice:
    """:func:`choose_runs`, and the same with the first ``k`` layers offloaded (``layers``:
    the step's layers, :func:`layer_runs`) priced by :func:`offload_overhead`: the least
    overhead that fits (or the smallest peak). Without layers or timing, no offload; ``away``:
    what the user's offload setting puts on the host while each run runs."""
    best = choose_runs(sequence, menus, target, offsets, away)
    if timing is None or len(layers) < 2:
        return best
    n, tried = len(sequence), []
    for k in range(1, min(len(layers), MAX_OFFLOAD_LAYERS + 1)):
        off = offload_choice(layers, k, n)
        # when each run's memory is free: from the most it could copy (keeping everything)
        most = {j: max(o.movable for o in menus[sequence[j]]) for j in off.runs}
        off = offload_choice(layers, k, n, offload_times(off, most, timing)[1])
        tried.append(_priced(choose_runs(sequence, menus, target, offsets, off.away, False),
                             off, timing))  # fmt: skip
    # the exact choice (slower: each offloaded run's options in turn) for the likeliest k
    for c in sorted(tried, key=lambda c: (not c.feasible, c.overhead_s))[:EXACT_OFFLOADS]:
        off = c.offload
        tried.append(_priced(choose_runs(sequence, menus, target, offsets, off.away), off, timing))
    for c in tried:
        best = c if _better(c, best) else best
    return best


def _priced(c: StepChoice, off: OffloadChoice, timing: StepTiming) -> StepChoice:
    """``c`` with the runs of ``off`` offloaded: their copies' cost added."""
    moved = {j: c.chosen[j].movable for j in off.runs}
    copies = {j: kept_tensors(c.chosen[j].decisions, timing.tensors.get(j, frozenset()))
              for j in off.runs}  # fmt: skip
    extra = offload_overhead(off, moved, timing, copies)
    return replace(c, offload=off, overhead_s=c.overhead_s + extra)
