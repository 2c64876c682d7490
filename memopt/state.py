"""What memopt knows about one optimized model: its compiled regions, the training step they
make, and the step plan.

A *region* is one graph memopt's partitioner planned (graph breaks, FSDP2's per-layer hooks
and per-block compilation make several). :class:`memopt.regions.RegionProgram` tells the
state when a region runs (:meth:`MemoptState.enter`) and when backward reaches it
(:meth:`MemoptState.backward_started`); from that the state learns the *step*: the regions'
invocations in forward order (a compiled region may run once per layer). With a budget and
more than one invocation per step, the first completed step is planned as a whole
(:mod:`memopt.step`) and the regions whose plan changes are recompiled once, at their next
run. Region reports (and the planning problems the step plan needs) are persisted under the
cache dir, so a warm compile cache reproduces the same report and the same step plan.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch
import torch.fx

from memopt import plan, ranks, step_excess, step_fit, step_notes, step_swap, step_waits
from memopt.config import MemoptConfig
from memopt.offload import step_offload as so
from memopt.peak_probe import PeakProbe, allocated
from memopt.region_registry import RegionRegistry
from memopt.report import Report, StepInfo
from memopt.step import (
    Option,
    StepChoice,
    exact_option,
    fraction_target,
    leaves_room,
    measured_target,
    region_menu,
    step_peak,
    step_terms,
)
from memopt.step_layers import step_offload_timing
from memopt.step_places import BACKWARD, FORWARD, outside_bytes, place_corrections, run_peaks
from memopt.step_solve import solve_step

log = logging.getLogger("memopt")

#: Devices whose step plans may offload layers to the host.
OFFLOAD_DEVICES = ("cuda",)

#: Step plans solved again when the step's regions change (new shapes, new graphs).
MAX_STEP_PLANS = 4
#: At world size > 1, steps a step plan must hold (after its measurement) before the ranks
#: stop agreeing their measurements (memopt.ranks) and stop re-checking it.
SETTLE_STEPS = 3
#: A settled step plan reads the allocator at each run (its outside bytes and overrun checks;
#: 20-35 µs of host time a read, two a run) every this many steps only (Whisper: 14 runs a step).
RECHECK_STEPS = 10


class MemoptState(RegionRegistry):
    """Regions compiled for one optimized model (or for the ``"memopt"`` backend)."""

    def __init__(self, config: MemoptConfig):
        super().__init__(config)
        self.param_handle: Any = None  # memopt.params.FsdpOffload when param_offload
        self.waits = step_waits.Waits()  # what outside the regions settles first (StateSwap)
        self.swaps = step_swap.SwapOffers()  # ... and whether the step plan keeps the swap
        # the step
        self._seq: list[int] = []
        self._backward_seen = False
        self.last_step: tuple[int, ...] = ()
        self.step_choice: StepChoice | None = None
        self.run_plan: dict[int, Option] = {}  # step position -> the plan that run compiles with
        self._report_seq: list[int] = []  # per run: the report (plan variant) it ran
        self.last_report_step: tuple[int, ...] = ()
        self._step_plans = 0
        self._planned_for: tuple[int, ...] | None = None
        self.graph_keys: dict[int, str] = {}  # region index -> its graph's code hash
        self.offload: so.StepOffload | None = None  # offload_layers across regions
        self.model_layers: tuple[str, ...] = ()  # what offload_layers / sync count (api)
        self._user_offload = bool(config.offload_k or config.sync)
        self._offload_by = ""  # what set self.offload (the report says it)
        self._away: dict[int, frozenset[int]] = {}  # run -> offloaded runs on the host then
        self._away_last: dict[int, frozenset[int]] = {}  # ... in the step just done
        self.notes: list[str] = []  # what the step could not apply, and why
        self._reached: set[int] = set()  # step positions backward has reached
        self._said: set[str] = set()  # the notes said (_say)
        self.cuda_graphs = False  # regions run as CUDA graphs: no peak to read; copies planned
        self.latest_sizes: dict[str, int] = {}  # dynamic sizes of the latest call, by name
        self._entry: list[int] = []  # CUDA bytes allocated as each run of this step began
        self._bwd_entry: dict[int, int] = {}  # ... and as its backward began
        self._entry_last: tuple[int, ...] = ()
        self._bwd_entry_last: dict[int, int] = {}
        self._entry_device: torch.device | None = None
        self._step_max0: int | None = None  # CUDA peak record as this step began
        self._probe: PeakProbe | None = None  # this step's allocator record (memopt.peak_probe)
        self._probe_next = False  # probe the next step (a step plan was just made)
        self._probed: int | None = None  # the peak the probe measured in the step just done
        self._probed_runs: tuple[int, ...] | None = None  # ... and each run's (step_places)
        self._start_now: int | None = None  # CUDA bytes allocated as the step now begins
        self._probes_left = MAX_STEP_PLANS + 2 + step_fit.OVERRUN_FIXES
        self._measured = False  # a probe measured a planned step (the target drops its reserve)
        self._relaxed = False  # the step was re-planned once to spend measured room
        self._compiled_in_step = True
        self._correction = 0  # bytes the step model missed (measured peak - predicted)
        self._corrections: tuple[int, ...] = ()  # ... run by run, for the step _places_for
        self._places_for: tuple[int, ...] = ()
        self._compiled_err: dict[int, int] = {}  # region -> Inductor's peak over the model's
        self._compiled_at: dict[int, dict[tuple, int]] = {}  # placed: (pos, signature) -> bytes
        self._compiled_num: dict[int, dict[frozenset, int]] = {}  # ... and signature -> number
        self._record: int | None = None  # a new CUDA peak record set by the step just done
        self._settled = 0  # steps since the step plan last changed or was last measured
        self._steps = 0  # steps finished
        self._reading = True  # this step reads the allocator at each run (CUDA, byte budget)
        self._read_next = False  # a new step was seen without reads: read (and plan) the next
        self.measured_peak: int | None = None
        self.went_back_from: int | None = None  # the overrun the step went back from (step_fit)
        self._fit: step_fit.FitPlan | None = None  # the plan to go back to (memopt.step_fit)
        self._fixes_left = step_fit.OVERRUN_FIXES  # plans past the last, for an overrun

    def known_cluster_ids(self) -> set[str]:
        return {c["cluster_id"] for r in self.regions for c in r.clusters}

    def report(self, optimizer: Any = None) -> Report:
        rows: list[dict] = []
        if self.param_handle is not None or optimizer is not None:
            from memopt.params import placement_rows

            rows = placement_rows(self.param_handle, optimizer)
        notes = tuple(self.coverage_notes)
        rep = Report(self.config, list(self.regions), rows, self.step_info(), notes=notes)
        known = {k for r in self.regions for k in r.symbols}
        latest = {k: v for k, v in self.latest_sizes.items() if k in known}
        return rep.at(latest, source="the latest call") if latest else rep

    def step_info(self) -> StepInfo | None:
        # the step under way once its backward has begun, else the last one finished
        now = self._backward_seen and bool(self._report_seq) or not self.last_report_step
        seq = tuple(self._report_seq) if now else self.last_report_step
        if not seq:
            return None
        ran = tuple(self._seq) if now else self.last_step
        c = self.step_choice if self._planned_for == ran else None
        off = self.offload
        return StepInfo(
            sequence=seq,
            complete=bool(self.last_step),
            forward_known=bool(self.last_step) or self._backward_seen,
            input_keys=tuple(self.run_inputs[not now]),
            run_sizes=tuple(self.run_sizes[not now]),
            offload_runs=tuple(sorted(off.positions)) if off else (),
            offloaded_bytes=off.counts(now).offloaded_bytes if off else 0,
            prefetched=off.counts(now).prefetched if off else 0,
            offload_steps=off.counts(now).steps if off else 0,
            measured_peak=self.measured_peak,
            step_plans=self._step_plans,
            plan_pending=self.step_choice is not None and c is None,
            went_back_from=self.went_back_from,
            offload_skipped=off.counts(now).skipped if off else 0,
            offload_by=self._offload_by if off else "",
            planned_offload_layers=c.offload.k if c and c.offload and off else 0,
            notes=tuple(self.notes),
            peak=c.peak if c else None,
            peak_at=c.peak_at if c else None,
            target=c.target if c else None,
            feasible=c.feasible if c else None,
            overhead_s=c.overhead_s if c else None,
            overhead_floor_s=c.overhead_floor_s if c else None,
        )

    # --- the step ------------------------------------------------------------------------------
    def held_bytes(self) -> int:
        """Activation bytes the invocations run so far in this step keep for their backward."""
        regions = [self.regions[i] for i in self._report_seq if i < len(self.regions)]
        return sum(r.final_saved_bytes or 0 for r in regions)

    def occurrences_before(self, ids: Collection[str]) -> dict[str, int]:
        """Occurrences of the clusters ``ids`` in this step's runs so far (none when the next
        forward starts a new step)."""
        out: dict[str, int] = {}
        if self._backward_seen:
            return out
        for i in self._report_seq:
            for c in self.regions[i].clusters if i < len(self.regions) else ():
                if any(plan.names(p, c["cluster_id"]) for p in ids):  # a short id names it too
                    out[c["cluster_id"]] = out.get(c["cluster_id"], 0) + c["freq"]
        return {k: v for k, v in out.items() if v}

    def enter(self, index: int, device: torch.device | None = None) -> int:
        """Region ``index`` runs its forward (called by RegionProgram, grad mode on); returns
        the run's position in the step."""
        if self._backward_seen and self._seq:
            self._finish_step()
        self._seq.append(index)
        if len(self._seq) == 1:  # the step's first run
            self._compiled_in_step = False
        if isinstance(self.config.budget, int) and device is not None and device.type == "cuda":
            if len(self._seq) == 1:
                self._reading = self._must_read()
                self._step_max0 = allocated(device)[1] if self._reading else None
                if self._reading and self._probe_next and self._probes_left > 0:
                    self._probe = PeakProbe.start(device)
            if self._probe is not None:
                self._probe.mark((FORWARD, len(self._seq) - 1))
            self._entry_device = device
            if self._reading:
                self._entry.append(allocated(device)[0])
        if self.offload is not None:
            self.offload.forward_reached(len(self._seq) - 1)
        return len(self._seq) - 1

    def run_option(self, pos: int, index: int) -> Option | None:
        """The plan the step plan gave the run at ``pos`` (None: the region's own)."""
        planned = self._planned_for
        if planned and pos < len(planned) and planned[pos] == index:
            return self.run_plan.get(pos)
        return None

    def record_run(
        self, report_index: int, args: Sequence[Any] = (), sizes: dict[str, int] | None = None
    ) -> None:
        """Which compiled plan (its report) the run just entered used, its arguments and its
        region's symbols' sizes."""
        self._report_seq.append(report_index)
        self.note_run_inputs(report_index, args, sizes)

    def backward_started(self, pos: int) -> None:
        """Backward reaches the run at step position ``pos``."""
        if not (self._backward_seen or self.last_step) and self._user_offload:
            note = so.first_backward_note(self)
            self._say(note or "", note)  # the same note as the step's end would say
        self._backward_seen = True
        self._reached.add(pos)
        if self._probe is not None:
            self._probe.mark((BACKWARD, pos))
        if self._entry and pos < len(self._entry):
            dev = self._entry_device
            self._bwd_entry[pos] = allocated(dev)[0]

    def _finish_step(self) -> None:
        self._say(
            "no backward", step_notes.forwards_without_backward(len(self._seq), len(self._reached))
        )
        self._reached = set()
        probed = self._probe.finish() if self._probe is not None else None
        runs = run_peaks(self._probe.places, len(self._seq)) if probed is not None else None
        dev = self._entry_device
        reading = allocated(dev) if dev is not None and self._step_max0 is not None else None
        self._probe, self._record = None, self._measured_peak(reading)
        # graph replays allocate nothing: no peak to read; a swap declined as the step began
        if self.cuda_graphs or self.swaps.declined_moved():  # moved in it: not the plan's peak
            probed = runs = self._record = None
        # allocated as the next step begins: what the step left behind for good (optimizer
        # states at the first optimizer step) counts in a plan made now (_offsets: ahead)
        start = reading[0] if reading is not None else None
        self.last_step, self._seq, self._backward_seen = tuple(self._seq), [], False
        self.last_report_step, self._report_seq = tuple(self._report_seq), []
        self.new_step_inputs()
        self._entry_last, self._entry = tuple(self._entry), []
        self._bwd_entry_last, self._bwd_entry = self._bwd_entry, {}
        # at world size > 1 under a byte budget on CUDA every rank takes the largest of each
        # rank's measurements (what the step plan is made from), until the plan has held for
        # SETTLE_STEPS steps (each agreement waits for the GPU's queue once)
        unsettled = self._settled < SETTLE_STEPS or self.last_step != self._planned_for
        if self._entry_last and ranks.world_size() > 1 and unsettled:
            agreed = ranks.agree_step(
                probed, self._record, self._compiled_in_step, self._entry_last,
                self._bwd_entry_last, runs, start,
            )  # fmt: skip
            probed, self._record, self._compiled_in_step = agreed[:3]
            self._entry_last, self._bwd_entry_last, runs, start = agreed[3:]
        self._start_now = start
        self._finish_probe(probed, runs)
        self._fit = step_fit.keep(self, self._fit)
        self._away_last = self._away if self.offload is not None else {}
        if self.offload is not None:
            self.offload.new_step()
        self._steps += 1
        plans = self._step_plans
        self._decide()
        news = self._step_plans != plans or self._probed is not None  # a plan or a measurement
        self._settled = 0 if news else self._settled + 1

    def _say(self, what: str, note: str | None) -> None:
        """A note for the user (step_notes), once for ``what``: a warning, a step report line."""
        if note is not None and what not in self._said:
            self._said.add(what)
            log.warning("memopt: %s", note)
            self.notes.append(note)

    def _must_read(self) -> bool:
        """Whether the step now starting reads the allocator at each run: until the plan has
        held SETTLE_STEPS steps, for a probe or a deferred plan, then every RECHECK_STEPS steps
        (memory outside the regions may still grow). Agreed state: the same on every rank."""
        return (
            self._settled < SETTLE_STEPS
            or self._probe_next
            or self._read_next
            or self._steps % RECHECK_STEPS == 0
        )

    def _decide(self) -> None:
        """A step plan for the step just done, when it is new or outgrew its plan."""
        if self._step_plans >= MAX_STEP_PLANS:
            if step_fit.last_plan(self, self._fit) != "fix":
                return
            self._fixes_left -= 1  # one rank alone re-planning would break the agreed state
            agreed = self._settled < SETTLE_STEPS or ranks.world_size() == 1
            if agreed and self._outgrown():  # the overrun measured, its correction planned
                self._step_plans += 1
                self.plan_step(self.last_step)
            else:  # nothing to correct it with: go back or say it
                step_fit.last_plan(self, self._fit)
            return
        if self.last_step == self._planned_for:
            if self.step_choice is None and self._probed is not None and self._off_target():
                self._step_plans += 1  # one region over (or well under) its byte budget
                self.plan_step(self.last_step)
            elif (
                self.step_choice is not None and self._compiled_in_step and self._compiled_excess()
            ):
                self._step_plans += 1  # a re-planned run compiled above its prediction
                self.plan_step(self.last_step)
            elif (self._settled < SETTLE_STEPS or ranks.world_size() == 1) and self._outgrown():
                self._step_plans += 1
                self.plan_step(self.last_step)
            return
        if self._entry_device is not None and not self._entry_last or self.waits.pending(self._say):
            self._read_next = True  # a step without reads, or a swap settling: plan the next
            self.swaps.saw_step(partial(self._offsets, self.last_step, True))
            return
        self._read_next = False
        self._step_plans += 1
        self._planned_for = self.last_step
        self._plan_offload(self.last_step)
        over = self._compiled_excess()
        if self.config.budget is not None and len(self.last_step) > 1 or over:
            self.plan_step(self.last_step)
        elif self._entry_last and isinstance(self.config.budget, int):
            self._probe_next = True  # one region on CUDA: measure what its own plan holds

    def _compiled_excess(self) -> bool:
        """Whether the compiled plans' Inductor peaks over the model re-plan the step now
        (:func:`memopt.step_excess.check`: each excess is placed where it happens)."""
        return step_excess.check(self)

    def _off_target(self) -> bool:
        """Whether the one region of the step, planned alone, peaked above its byte budget as
        measured, or its plan costs time and left room (``_roomy``): then the step is planned
        as steps of several regions are, with the region's measured miss as the first
        correction. Any excess counts: a user's budget is a peak not to pass (DiT's
        one-region plans measured 0.2% over theirs, inside the old +0.5% margin)."""
        if len(self.last_step) != 1:
            return False
        index, offsets = self.last_step[0], self._offsets(self.last_step)
        planner = self.regions[index].extra.get("planner") or {}
        over = self._probed > self.config.budget
        costly = (planner.get("predicted_overhead_s") or 0) > 0  # something to give back
        if not over and not (costly and self._roomy(self._probed, planner.get("budget_bytes"))):
            return False
        if offsets is None or planner.get("predicted_peak") is None:
            return False
        self.measured_peak = self._probed
        miss = self._probed - planner["predicted_peak"] - offsets[0]
        self._correction = max(0, miss) if over else miss
        self._places_for = ()  # one run: its own plan's miss is the run's
        self._relaxed |= not over
        log.info(
            "memopt: measured step peak %d bytes, %s the budget %d: planning the step "
            "(correction %d)", self._probed, "above" if over else "well under",
            self.config.budget, self._correction,
        )  # fmt: skip
        return True

    def _roomy(self, measured: int, target: int | None) -> bool:
        """``step.leaves_room``, once a step: a relaxed plan that overruns is corrected, kept.
        Only while two step plans are left (the relax and a correction of its overrun)."""
        b = self.config.budget
        if self._relaxed or not self._measured or not isinstance(b, int):
            return False
        return self._step_plans + 2 <= MAX_STEP_PLANS and leaves_room(b, measured, target)

    def _finish_probe(self, peak: int | None, runs: tuple[int, ...] | None) -> None:
        """The probed step's peak (and each run's), kept only if nothing compiled during the
        step (autotuning allocates too); else the next step is probed."""
        self._probed, self._probed_runs = None, None
        if self._compiled_in_step or peak is None:
            return
        self._probes_left -= 1
        self._probe_next, self._probed, self._measured = False, peak, True
        self._probed_runs = runs

    def _outgrown(self) -> bool:
        """Whether the step plan no longer fits: the memory outside the regions grew since it
        was made (optimizer states appear at the first optimizer step), or the step just run
        on it peaked above the prediction (what no region shows: the sharding engine's
        buffers in the backward), measured by the allocator's record of the first steady step
        after each step plan (memopt.peak_probe), else by a new CUDA peak record. The excess
        is kept as a correction."""
        c = self.step_choice
        offsets = self._offsets(self.last_step)
        if (
            c is None
            or offsets is None
            or not self._entry_last
            or not isinstance(self.config.budget, int)
        ):  # nothing read (a CPU): nothing outside the regions grows
            return False
        n = len(self.last_step)
        peak, _ = step_peak(range(n), self.run_plan, offsets, self._away)
        measured = self._probed if self._probed is not None else self._record
        if measured is not None:
            self.measured_peak = measured
            roomy = c.overhead_s > 0 and self._roomy(measured + self._grown(), c.target)
            runs = self._probed_runs if self._probed is not None else None
            if runs is not None and len(runs) == n:  # measured run by run: exact at each
                terms = step_terms(range(n), self.run_plan, offsets, self._away)
                fixed = place_corrections(self._corrections_of(self.last_step), terms, runs)
                self._corrections, self._places_for = fixed, self.last_step
                self._correction, peak = max(fixed), max(runs)
            elif measured > peak or roomy:  # a miss under the prediction counts when relaxing
                self._correction += measured - peak
                self._corrections = tuple(x + measured - peak for x in self._corrections)
                peak = measured
            log.info("memopt step plan: measured step peak %d bytes, predicted %d (corrections "
                     "by run %s)", measured, peak, self._corrections_of(self.last_step))  # fmt: skip
            if roomy:  # spend the room the reserve or the model's over-prediction left
                self._relaxed = True
                log.info("memopt step plan: measured step peak %d under the budget's "
                         "measured target: planning the step again", measured)  # fmt: skip
                return True
        peak += self._grown()  # the step beginning now holds what the last one left
        # over the plan's target yet, measured, inside the budget: it stays, as one region's
        # plan does (_off_target). A re-plan is a recompile: Swin's took 60 s on an H200 for
        # a plan measured 0.08% under its budget (docs/zoo.md, forty-second session)
        grown = peak > c.target and not (self._measured and peak <= self.config.budget)
        if grown and measured is None:
            log.info("memopt step plan: the bytes outside the regions grew: predicted step peak "
                     "%d, the plan's %d, target %d", peak, c.peak, c.target)  # fmt: skip
        return grown

    def _measured_peak(self, reading: tuple[int, int] | None) -> int | None:
        """The CUDA peak of the step just run (``reading``: the allocator's (current, peak)
        as it ended), when it set a new record and nothing compiled during it (autotuning
        allocates too); None otherwise."""
        if reading is None or self._step_max0 is None or self._compiled_in_step:
            return None
        return reading[1] if reading[1] > self._step_max0 else None

    def note_compile(self) -> None:
        """A region compiled during the current step (its peak is not the plan's)."""
        self._compiled_in_step = True

    def _plan_offload(self, sequence: Sequence[int]) -> None:
        """``offload_layers=k`` or the sync dict when the layers are compiled regions
        (:func:`memopt.offload.step_offload.user_step_offload`)."""
        keys = so.region_keys(self, sequence)  # None: regions holding layers offload inside
        if keys is None:
            return self._say("split layers", so.split_layers_note(self, sequence))
        got = so.user_step_offload(self.config, keys, self.last_layer_reads(sequence))
        if got is not None and got.note:
            self._say(got.note, got.note)  # said once (first_backward_note may have said it)
        elif got is not None:
            self.offload, self._offload_by = got.offload, got.setting
            self._away = got.away if got.away is not None else self._away

    def plan_step(self, sequence: Sequence[int]) -> StepChoice | None:
        """Solve one plan for the step ``sequence`` and assign each region its part; regions
        whose plan changes recompile at their next run."""
        self.went_back_from = None
        missing = sorted({r for r in sequence if r not in self.problems})
        if missing:
            log.warning(
                "memopt: no planning problem for region(s) %s (compiled elsewhere and not "
                "persisted); the budget is applied to each region alone",
                ", ".join(map(str, missing)),
            )
            self._planned_for = tuple(sequence)
            return None
        t0 = time.perf_counter()  # logged: a step plan took ~45 s on an H200 (Mistral, BART)
        menus = {r: self._menu(r) for r in set(sequence)}
        t_menus = time.perf_counter() - t0
        layers, timing = self._offload_options(sequence)
        target, offsets = self._target(sequence, menus), self._offsets(sequence, ahead=True)
        away = self._away if self._user_offload and self.offload is not None else None
        problems = {r: self.problems[r] for r in set(sequence)}
        solve = partial(solve_step, sequence, menus, target, layers, timing, away, problems,
                        self._solve_at)  # fmt: skip
        choice = self.swaps.choose(solve(offsets), solve, self._say)  # or without the swap
        self.step_choice, self._planned_for = choice, tuple(sequence)
        if not self._user_offload:  # the step plan's own offload (replaces an earlier one)
            off = choice.offload
            self.offload, self._away = None, {}
            if off is not None:
                self.offload = so.StepOffload(
                    off.runs, self.config.offload_min_bytes, dict(off.reload_at)
                )
                self._away = dict(off.away)
                self._offload_by = f"chosen by the step plan: {off.k} layer(s)"
                log.info("memopt step plan: offloading the first %d layer(s): runs %s",
                         off.k, list(off.runs))  # fmt: skip
        changed = [p for p, o in choice.chosen.items() if self.run_plan.get(p) != o]
        self.run_plan = dict(choice.chosen)
        self._probe_next = isinstance(self.config.budget, int)  # measure the plan's real peak
        if not choice.feasible:
            log.warning(
                "memopt: %s", step_notes.infeasible(self.config.budget, choice.peak, target)
            )
        log.info("memopt step plan: %s; planned in %.1f s (menus %.1f s)",
                 step_notes.describe_choice(choice, sequence, len(menus), changed),
                 time.perf_counter() - t0, t_menus)  # fmt: skip
        return choice

    def _offload_options(self, sequence: Sequence[int]) -> tuple[list[list[int]], Any]:
        """The layers and timing the step planner prices offloading with: only for "auto" with
        the offload pass on, no region holding layers (they offload inside their graph), not on
        a CPU (saved tensors are in host memory) nor with CUDA graphs (they copy reloads)."""
        if (
            not self.config.offload_auto
            or "offload" in self.config.disable_passes
            or self.cuda_graphs
            or any(so.holds_layers(self.regions[i]) for i in set(sequence))
            or self.problems[sequence[0]].device_type not in OFFLOAD_DEVICES
        ):
            return [], None
        keys = [self.graph_keys.get(i, i) for i in sequence]
        return step_offload_timing(sequence, keys, self.problems, self.last_layer_reads(sequence),
                                   self.config.offload_min_bytes)  # fmt: skip

    def _offsets(self, sequence: Sequence[int], ahead: bool = False) -> list[int] | None:
        """Per run, the CUDA bytes no region's model holds (other layers' parameters, optimizer
        states, the batch), from what was allocated as each run began in the step just done:
        allocated - bytes held by earlier runs - the run's own inputs. A byte budget is for
        the step's real peak, so they count. ``ahead``: for the step beginning now, plus
        what is allocated now beyond the last step's start (optimizer states made by its
        optimizer step: without them the first step plan outgrew itself at once)."""
        err = [self._compiled_err.get(r, 0) for r in sequence]  # placed ones: in _problem
        placed = any(r in self._compiled_at for r in sequence)  # their problems hold them
        if not self._entry_last and (any(err) or placed) and set(sequence) <= self.problems.keys():
            return err  # nothing read (a CPU): the compiled plans' errors alone
        if len(self._entry_last) != len(sequence) or not set(sequence) <= self.problems.keys():
            return None  # a region restored from a compile cache without its problem
        ran = self.last_report_step if len(self.last_report_step) == len(sequence) else sequence
        saved = [self.regions[r].final_saved_bytes or 0 for r in ran]
        # runs offloaded in the step just done were not allocated while away: add them back
        moved = [b - self.problems[r].saved_input_bytes for b, r in zip(saved, sequence)]
        static = [self.problems[r].problem.timeline.static_bytes for r in sequence]
        out = outside_bytes(
            self._entry_last, self._bwd_entry_last, saved, moved, static, self._away_last
        )
        grown = self._grown() if ahead else 0
        return [o + c + e + grown for o, c, e in zip(out, self._corrections_of(sequence), err)]

    def _grown(self) -> int:
        """CUDA bytes allocated as this step begins beyond the last step's start."""
        now, last = self._start_now, self._entry_last
        return max(0, now - last[0]) if now is not None and last else 0

    def _corrections_of(self, sequence: Sequence[int]) -> list[int]:
        """Per run of ``sequence``, the bytes the step model missed there: measured run by run
        for that step, else the one correction (the largest run's for another step)."""
        if self._places_for == tuple(sequence):
            return list(self._corrections)
        return [self._correction] * len(sequence)

    def _target(self, sequence: Sequence[int], menus: dict[int, Sequence[Option]]) -> int:
        from memopt.passes.plan_budget import step_bytes

        b = self.config.budget
        if isinstance(b, float):
            return fraction_target(b, sequence, menus)
        if self._measured:  # the correction holds what no graph shows: no blind reserve
            return measured_target(b)
        return step_bytes(b, self.problems[sequence[0]].device_type)

    def _problem(self, index: int, option: Option | None = None) -> Any:
        """Region ``index``'s planning problem with the compiled plans' placed excesses and
        numbers: those that hold for ``option`` (memopt.step_excess.holds), or all of them."""
        rp, err, at = self.problems[index], self._compiled_err.get(index, 0), self._compiled_at
        items = step_excess.items(
            at.get(index), err, rp.problem, option, self._compiled_num.get(index)
        )
        return replace(rp, problem=step_excess.corrected(rp.problem, items)) if items else rp

    def _menu(self, index: int) -> list[Option]:
        self.retime((index,))  # kernels that had no room as it compiled are timed now
        return step_excess.conditioned(self, index, region_menu, merge=step_excess.union)

    def _solve_at(self, index: int, budget: int) -> Option | None:
        fit = partial(
            step_excess.cheaper, budget
        )  # priced with the excesses that hold: it may not fit
        return step_excess.conditioned(self, index, exact_option, budget, merge=fit)
