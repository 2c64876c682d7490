"""What Inductor's compiled plans hold beyond the planner's model, placed where they peak.

A compiled plan's buffer plan (the region report's ``inductor`` section,
:mod:`memopt.inductor_buffers`) can hold bytes the planner's FX-level model does not: a
pointwise value Inductor's lowering realizes (past its op-count and read thresholds, lower on
a GPU than on a CPU) where the model fuses it into its consumer. Gemma 2's loss gradient
through its logit soft-cap is one: a 2.1 GB logits tensor at the backward's first kernel
(docs/zoo.md, forty-third session). Added to the region's every plan as one number, such an
excess also lifts plans whose peak lies elsewhere, and says nothing about which saved tensors
are live where it happens.

Here it is an item of the region's planning problem instead: at the step position of the
planner's op where Inductor's plan peaks, the bytes Inductor holds there beyond the model's
live bytes under the same plan, and, at every position, the plan's peak over its model (the
region's *number*). Both hold only for the plans that do with the candidates that op reads
what the plan they were measured on did (:func:`signature`, :func:`holds`,
:func:`conditioned`, and :func:`flips` for the plans that avoid one cheaply): on Mistral a
plan recomputing the LM head ran 565 MB under a prediction that carried an excess measured on
plans keeping it, and on Gemma 2's soft-capped head the plan that recomputes the soft-cap runs
a logits tensor lower and was priced as high. Where no
position is known (a report restored from a compile cache before positions were recorded, a
graph whose names the planner lacks), the excess stays one number of the region at every
position of every plan (memopt.state's ``_compiled_err``, the runs' offset).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from dataclasses import replace
from typing import Any

from memopt import inductor_buffers as buffers
from memopt.planner.problem import derived

log = logging.getLogger("memopt")


def position(sec: Mapping[str, Any], timeline: Any) -> int | None:
    """The step position (forward ops, then backward ops) of the planner's op where the
    section's peak happens: the first of the section's peak nodes the planner's graph has.
    None where the section or the timeline names none."""
    fwd = (sec.get("fwd_peak") or 0) >= (sec.get("bwd_peak") or 0)
    names = sec.get("fwd_peak_nodes" if fwd else "bwd_peak_nodes") or ()
    ops = timeline.fwd_op_names if fwd else timeline.bwd_op_names
    where = {n: i for i, n in enumerate(ops)}
    q = next((where[n] for n in names if n in where), None)
    if q is None:
        return None
    return q if fwd else timeline.n_fwd + q


def profile(problem: Any, option: Any) -> Any:
    """The model's memory profile of ``option``'s plan (its decisions and sync dict) on
    ``problem``; None when they do not apply to it."""
    from memopt.planner import memory_profile, sync_windows

    try:
        windows = sync_windows(option.sync, problem.timeline) if option.sync else {}
        return memory_profile(problem, option.decisions, windows)
    except (ValueError, KeyError):
        return None


def excess(problem: Any, sec: Mapping[str, Any], option: Any = None) -> tuple[int, int] | None:
    """``(position, bytes)``: what a compiled plan's Inductor peak (``sec``) holds beyond the
    model at that position, under ``option`` (a step option, as compiled); without one (the
    region's own plan), beyond the model's peak of it (``sec["model_peak"]``: a lower bound of
    the excess at the position). None where no position is known or nothing is over."""
    pos = position(sec, problem.timeline)
    peak = sec.get("peak")
    if pos is None or peak is None:
        return None
    if option is not None:
        prof = profile(problem, option)
        model = prof.curve[pos] if prof is not None and pos < len(prof.curve) else None
    else:
        model = sec.get("model_peak")
    if model is None or peak <= model:
        return None
    return pos, peak - model


def grow(items: MutableMapping[int, int], pos: int, nbytes: int) -> None:
    """Keep the larger excess at ``pos`` (each is measured against the uncorrected model)."""
    items[pos] = max(items.get(pos, 0), nbytes)


def remainder(items: Mapping[int, int] | None, flat: int) -> dict[int, int]:
    """What placed excesses (step position -> bytes) add beyond ``flat``, the region's
    excess counted at every position (its runs' offset)."""
    return {p: n - flat for p, n in (items or {}).items() if n > flat}


Signature = frozenset  # of (candidate name, strategy name): what a plan does with them


#: A candidate under this share of an excess's bytes is left out of its signature. A
#: judgment: Inductor's excess is a buffer it realizes, whose size a tensor that small does not
#: change; without it a plan recomputing a 32 KB pad read at Gemma 2's soft-capped loss
#: kernel (CPU) was priced without the 8.4 MB excess it still runs with.
SIGNATURE_SHARE = 1 / 8


def signature(
    problem: Any, decisions: Mapping[str, Any] | None, pos: int, nbytes: int = 0
) -> Signature:
    """The candidates the op at step position ``pos`` reads (in the forward: made and not yet
    past their last forward use; in the backward: between their first and last backward use)
    of at least :data:`SIGNATURE_SHARE` of ``nbytes`` (the excess), and what the plan of
    ``decisions`` does with each, as applied."""
    q, least = pos - problem.timeline.n_fwd, SIGNATURE_SHARE * nbytes
    return frozenset(
        (c.name, _did(c, decisions))
        for c in problem.candidates
        if c.nbytes >= least
        and (
            (c.produce_pos <= pos <= c.fwd_last)
            if q < 0
            else (c.first_bwd_use_pos <= q <= c.bwd_last)
        )
    )


def holds(problem: Any, decisions: Mapping[str, Any] | None, sig: Signature) -> bool:
    """Whether the plan of ``decisions`` does with the candidates of ``sig`` what the plan an
    excess was measured on did (:func:`signature`)."""
    by_name = problem.by_name
    return all(name in by_name and _did(by_name[name], decisions) == s for name, s in sig)


def _did(c: Any, decisions: Mapping[str, Any] | None) -> str:
    from memopt.plan import Strategy
    from memopt.planner.memory import applied_strategy

    return applied_strategy(c, Strategy((decisions or {}).get(c.name, Strategy.KEEP))).name


def items(
    placed: Mapping[tuple[int, Signature], int] | None,
    flat: int,
    problem: Any = None,
    option: Any = None,
    numbers: Mapping[Signature, int] | None = None,
) -> dict[int, int]:
    """What a region's placed excesses (``(position, signature)`` -> bytes) and its numbers
    (signature -> bytes, at every position) add beyond ``flat`` (:func:`remainder`): those
    that hold for ``option`` on ``problem`` (:func:`holds`), or, without an option, all of
    them (the larger at each position)."""
    ok = lambda sig: option is None or holds(problem, option.decisions, sig)  # noqa: E731
    n = max((b for sig, b in (numbers or {}).items() if ok(sig)), default=0)
    out = dict.fromkeys(range(problem.timeline.n_positions), n) if n > flat else {}
    for (pos, sig), nbytes in (placed or {}).items():
        if ok(sig):
            grow(out, pos, nbytes)
    return remainder(out, flat)


def conditioned(st: Any, index: int, fn: Any, *args: Any, merge: Any) -> Any:
    """``fn(problem, rates, *args, saved_inputs, max_depth)`` (memopt.step's ``region_menu``
    or ``exact_option``) on region ``index``'s problem, with each placed excess where it holds.

    An excess holds for the plans that do with the candidates its op reads what the plan it was
    measured on did (where that plan is not known, the signature is empty: it holds for every
    plan). On Mistral at torch 0.1's peak (H200) 780 MB sat at one backward op under every plan
    that kept the LM head's output, offloading or not (forty-fifth session); a plan that
    recomputed the LM head (and more) ran 565 MB under the prediction that carried them
    (forty-fourth). The solver's problem cannot say "unless": ``fn`` runs with every excess,
    with none, and with none on each of :func:`flips` (a plan that changes what an excess's op
    reads, cheaply), and each answer is priced with the excesses that hold for it; ``merge``
    joins them (a priced option may no longer fit what it was solved for: ``merge`` checks)."""
    rp, every = st.problems[index], st._problem(index)

    def call(p: Any) -> Any:
        return fn(p.problem, p.rates, *args, p.saved_input_bytes, p.max_depth)

    if every is rp:  # nothing placed beyond the region's number
        return call(rp)
    got = merge(_priced(st, index, call(every), every.problem, True),
                _priced(st, index, call(rp), rp.problem, False))  # fmt: skip
    for fp in flips(st, index):  # plans that change what an excess's op reads
        got = merge(got, _priced(st, index, call(fp), fp.problem, False))
    return got


#: Flipped problems solved per region solve (the cheapest first). A judgment, not fitted:
#: each costs one more menu; Gemma 2's soft-cap flip is the cheapest of its op's.
FLIPS = 3


def flips(st: Any, index: int) -> list[Any]:
    """Region ``index``'s problem with no excess, once per flip: one cluster fixed to recompute
    (or compromise, :func:`_flip_strategy`) up to a candidate that an excess's op reads and its
    plan kept. Such a plan changes what
    the op reads, so the excess does not hold for it, which neither of :func:`conditioned`'s
    two solves finds when it is cheap: solved with none, the plans keep the candidate (the
    excess holds); solved with every excess, they lower the peak elsewhere. On Gemma 2 at
    torch 0.3's peak (H200, forty-sixth session) the step paid 8.7 ms of predicted recompute
    (LM head included) to lower a 2.1 GB excess that the soft-cap's recompute alone removes
    on the CPU. The :data:`FLIPS` cheapest, by the recompute seconds of what the fixed count
    covers (a count covers occurrences below it, as a plan string's does)."""
    from memopt.plan import Strategy
    from memopt.planner.problem import covered
    from memopt.planner.timing import recompute_s

    rp, err = st.problems[index], st._compiled_err.get(index, 0)
    p = rp.problem
    sigs = [sig for (_, sig), n in st._compiled_at.get(index, {}).items() if n > err]
    sigs += [sig for sig, n in st._compiled_num.get(index, {}).items() if n > err]
    cost: dict[tuple[str, Strategy, int], float] = {}
    for name, did in sorted(frozenset().union(*sigs)):
        c = p.by_name.get(name)
        if did != Strategy.KEEP.name or c is None or not c.recomputable:
            continue
        cluster = p.clusters[c.cluster_id]
        n = -1 if c.occurrence >= max(x.occurrence for x in cluster) else c.occurrence + 1
        key = (c.cluster_id, _flip_strategy(c), n)  # -1: all, as the solver writes it
        if c.cluster_id in p.fixed or key in cost:
            continue
        cost[key] = sum(recompute_s(x, key[1], rp.rates) for x in covered(cluster, n))
    out = []
    for cid, how, n in sorted(cost, key=lambda k: (cost[k], k))[:FLIPS]:
        fixed = {**p.fixed, cid: (int(how), n)}
        flipped = derived(p, ("fixed", cid, int(how), n), lambda f=fixed: replace(p, fixed=f))
        out.append(replace(rp, problem=flipped))
    return out


def _flip_strategy(c: Any) -> Any:
    """Recompute, or the compromise where that is all the candidate has (memopt.decide
    ignores strategy 1 there)."""
    from memopt.plan import Strategy

    return Strategy.COMPROMISE if c.compromise_only else Strategy.RECOMPUTE


def _priced(st: Any, index: int, got: Any, solved_on: Any, every: bool) -> Any:
    """``got`` (a list of options, or one option or None) with each option's peak moved by
    what the excesses that hold for it change in the model's peak against ``solved_on``
    (``every``: the problem with every excess; an option the model cannot price stays as
    solved there, and is dropped when solved on the problem with none)."""
    if isinstance(got, list):
        out = (_priced(st, index, o, solved_on, every) for o in got)
        return [o for o in out if o is not None]
    if got is None:
        return None
    here, there = profile(st._problem(index, got).problem, got), profile(solved_on, got)
    if here is None or there is None:
        return got if every else None
    return replace(got, peak=got.peak + here.peak - there.peak)


def corrected(problem: Any, items: Mapping[int, int] | None) -> Any:
    """``problem`` with ``items`` (step position -> bytes) live at their positions."""
    if not items:
        return problem
    return derived(problem, ("corrected", frozenset(items.items())), lambda: _with(problem, items))


def _with(problem: Any, items: Mapping[int, int]) -> Any:
    tl = problem.timeline
    fwd, bwd = list(tl.fwd_live_bytes), list(tl.bwd_live_bytes)
    for pos, nbytes in items.items():
        if pos < tl.n_fwd:
            fwd[pos] += nbytes
        else:
            bwd[pos - tl.n_fwd] += nbytes
    timeline = replace(tl, fwd_live_bytes=tuple(fwd), bwd_live_bytes=tuple(bwd))
    return replace(problem, timeline=timeline)


def check(st: Any) -> bool:
    """The compiled plans of the step just run against the planner's model, per region
    (``st``: memopt.state's MemoptState); whether the step must be (re-)planned now (before
    any measurement; on a CPU the only check): under a step plan by its target, never by a
    region's own budget (negative for a tight step's head region: a fit step re-planned).
    An excess whose position is known is placed there (``st._compiled_at``, by position and
    signature) and the plan's peak over its model is kept as the number of the plans like it
    (``st._compiled_num``, by signature): the problem of a plan holds, at every position, the
    largest number that holds for it and at the placed positions the excesses that hold
    (:func:`items`). The largest excess of a run with no known position stays one number of
    the region (``st._compiled_err``: the region's runs' offset, at every position)."""
    from memopt.step import step_peak

    if not isinstance(st.config.budget, int):
        return False
    runs, flat_runs = [], []  # every run; those whose excess no placement conditions
    was = _beyond(st)
    for pos, (r, ri) in enumerate(zip(st.last_step, st.last_report_step)):
        region, option = st.regions[ri], st.run_plan.get(pos)
        sec, plan = region.extra.get("inductor") or {}, region.extra.get("planner") or {}
        own = plan.get("budget_bytes") if st.step_choice is None else None
        compiled = option is not None and st.compiled_as(ri, option)
        runs.append((r, sec, option.peak, None) if compiled else
                    (r, sec, sec.get("model_peak"), own))  # fmt: skip
        # placed: a step option as compiled, or the region's own plan (no step plan yet, the
        # region's first compile: a counted plan's variant keeps what the own plan recomputes);
        # a run on another variant adds its excess to the step as a number
        rp = st.problems.get(r)
        got = None
        if sec and rp is not None and (compiled or (st.step_choice is None and ri == r)):
            o = option if compiled else _own(rp)
            got = excess(rp.problem, sec, o)
        if got is None:
            flat_runs.append(runs[-1])
            continue
        # kept with what the plan did with the candidates its op reads: the excess there, and
        # the plan's peak over its model as the number of the plans it holds for
        sig = signature(rp.problem, o.decisions, *got) if o is not None else frozenset()
        grow(st._compiled_at.setdefault(r, {}), (got[0], sig), got[1])
        if runs[-1][2] is not None and sec["peak"] > runs[-1][2]:
            grow(st._compiled_num.setdefault(r, {}), sig, sec["peak"] - runs[-1][2])
    errs = buffers.compiled_errors(runs)
    grown = {
        r: e for r, (e, _) in buffers.compiled_errors(flat_runs).items()
        if e > st._compiled_err.get(r, 0)
    }  # fmt: skip
    st._compiled_err.update(grown)
    now = _beyond(st)
    changed = set(grown) | {r for r in set(was) | set(now) if was.get(r) != now.get(r)}
    if not changed:  # nothing new beyond the regions' numbers
        return False
    over = any(o for r, (_, o) in errs.items() if r in changed)
    offsets, c, why = st._offsets(st.last_step, ahead=True), st.step_choice, ""
    planned = c is not None and all(p in st.run_plan for p in range(len(st.last_step)))
    if planned and offsets is not None:
        chosen = {p: _at_items(st, r, st.run_plan[p]) for p, r in enumerate(st.last_step)}
        peak, at = step_peak(range(len(st.last_step)), chosen, offsets, st._away)
        # read on CUDA, the plan is measured at its first steady step: before that, only a
        # compiled plan over the budget itself re-plans (the target's reserve is for what
        # the measurement sees; Mistral's step plans went to Inductor's excess unmeasured)
        measuring = bool(st._entry_last) and st._probes_left > 0
        over |= peak > (st.config.budget if measuring else c.target)
        why = f" (predicted step peak {peak} at run {at}, the plan's {c.peak}, target {c.target})"
    log.info("memopt: Inductor's buffer plans peak above the planner's model of the compiled "
             "plans (bytes by region: %s; placed, by region and step position: %s; held for "
             "the plans like those measured, by region: %s)%s%s",
             dict(st._compiled_err), _placed(st), _numbers(st),
             ": planning the step with them" if over else "", why)  # fmt: skip
    return over


def _placed(st: Any) -> dict[int, dict[int, int]]:
    """Per region, its placed excesses by position (the larger at each), for the log."""
    return {r: items(v, 0) for r, v in st._compiled_at.items() if v}


def _numbers(st: Any) -> dict[int, list[int]]:
    """Per region, the numbers held for the plans like those they were measured on (log)."""
    return {r: sorted(v.values()) for r, v in st._compiled_num.items() if v}


def _beyond(st: Any) -> dict[int, dict[tuple, int]]:
    """Per region, its placed excesses (by position and signature) and its numbers (by
    signature) above its unconditioned number."""
    out: dict[int, dict[tuple, int]] = {}
    for r in set(st._compiled_at) | set(st._compiled_num):
        err = st._compiled_err.get(r, 0)
        at = {k: n for k, n in st._compiled_at.get(r, {}).items() if n > err}
        at.update({("number", k): n for k, n in st._compiled_num.get(r, {}).items() if n > err})
        if at:
            out[r] = at
    return out


def _own(rp: Any) -> Any:
    """The region's own plan as a step option (None where its problem does not keep it)."""
    from memopt.step import Option

    if rp.decisions is None:
        return None
    return Option(plans=(), sync=dict(rp.sync or {}), decisions=dict(rp.decisions))


def _at_items(st: Any, region: int, option: Any) -> Any:
    """``option`` with its peak on the region's problem corrected by the placed excesses (an
    option solved before the latest was placed is predicted lower than it will run)."""
    if region not in st.problems:
        return option
    rp = st._problem(region, option)
    if rp is st.problems[region]:  # nothing placed beyond the region's number
        return option
    prof = profile(rp.problem, option)
    return option if prof is None else replace(option, peak=max(option.peak, prof.peak))


def union(a: list[Any], b: list[Any]) -> list[Any]:
    """Step options ``a``, then the options of ``b`` whose plans ``a`` lacks."""
    keys = {o.key() for o in a}
    return a + [o for o in b if o.key() not in keys]


def cheaper(budget: int, a: Any, b: Any) -> Any:
    """The cheaper of step options ``a`` and ``b`` whose peak fits ``budget`` (None when
    neither does)."""
    fits = (o for o in (a, b) if o is not None and o.peak <= budget)
    return min(fits, key=lambda o: o.overhead_s, default=None)
