"""The step model corrected run by run (memopt.step_places): a probed step's places (each run's
forward and backward, cut at the run hooks) give each run its own correction, so that a plan
that changes one place's memory (an offload lowers the head's, not the step's end) is
predicted where it peaks. The CUDA measurements are given by hand; the region is a real CPU
compile (tests/test_step_overrun.py's)."""

from __future__ import annotations

from memopt.step import Option, step_peak, step_terms
from memopt.step_places import BACKWARD, FORWARD, outside_bytes, place_corrections, run_peaks
from tests.test_step_overrun import _probe, _state, _static


def test_run_peaks_takes_each_runs_largest_place():
    places = [((FORWARD, 0), 10), ((FORWARD, 1), 30), ((BACKWARD, 1), 25), ((BACKWARD, 0), 40)]
    assert run_peaks(places, 2) == (40, 30)
    assert run_peaks(places[:1], 2) is None  # run 1 has no place
    assert run_peaks([*places, (("other", 2), 5)], 2) is None  # a place of no run
    assert run_peaks(None, 2) is None


def test_outside_bytes_are_what_the_readings_hold_beyond_the_runs():
    # run 0 starts over 100 static bytes with 40 outside; run 1 after run 0 saved 300 (200
    # of them away), with 50 outside; its backward begins with 90 bytes of gradients outside
    out = outside_bytes(
        entry=[140, 100 + 300 - 200 + 50],
        bwd_entry={1: 100 + (300 - 200) + 400 + 90},  # static, held, its own saved, grads
        saved=[300, 400],
        moved=[200, 0],
        static=[100, 100],
        away={1: (0,)},
    )
    assert out == [40, 90]  # run 1: 50 outside as it began, 90 as its backward began


def _opt(peak: int, saved: int, movable: int = 0) -> Option:
    return Option((), peak=peak, saved=saved, label=f"{peak}", saved_inputs=saved - movable)


def test_per_run_corrections_predict_a_plan_that_moves_one_places_memory():
    """The thirtieth session's FSDP2 step in small: the step peaks at its end (run 0's
    backward, the optimizer step), the model at the head (run 2). One constant correction makes
    the measured plan exact but under-predicts a plan that offloads run 0 (it lowers the
    head, not the end); the corrections per run predict it exactly."""
    runs = [_opt(1000, 100, movable=80), _opt(1000, 100), _opt(1200, 50)]
    offsets = [10, 10, 10]
    terms = step_terms(range(3), dict(enumerate(runs)), offsets)
    assert terms == [1010, 1110, 1410]
    measured = (1500, 1390, 1400)  # the end holds every layer's reduced gradients
    fixed = place_corrections([0, 0, 0], terms, measured)
    assert fixed == (490, 280, -10)
    constant = max(measured) - max(terms)  # 90: what one correction learns
    away = {1: frozenset({0}), 2: frozenset({0})}  # run 0's saved tensors on the host
    one = [o + constant for o in offsets]
    each = [o + c for o, c in zip(offsets, fixed)]
    assert step_peak(range(3), dict(enumerate(runs)), one, away) == (1420, 2)  # 80 too low
    assert step_peak(range(3), dict(enumerate(runs)), each, away) == (1500, 0)  # the end


def _step(state, entry: int, probed: int | None = None, places=None) -> None:
    """A step of two runs of the one region, on CUDA, probed place by place."""
    state._seq, state._backward_seen = [0, 0], True
    state._entry, state._bwd_entry = [entry, entry], {0: 0, 1: 0}
    state._compiled_in_step = False
    if probed is not None:
        state._probe = _probe(probed)
        state._probe.places = places
    state._finish_step()


def test_a_probed_step_corrects_each_run_where_it_peaked():
    """After the step plan's probe, each run's prediction is its measured peak: the step's
    prediction is the measurement, at the run that held it; a step of other runs falls back to
    the largest run's correction. A probe without places corrects by one constant."""
    pair = 450_000
    state = _state(pair)
    entry = _static(state) + 1000
    _step(state, entry)
    assert state.step_choice is not None and state._probe_next
    offsets = state._offsets(state.last_step)
    terms = step_terms(range(2), state.run_plan, offsets, state._away)
    end, head = terms[0] + 30_000, terms[1] - 10_000  # run 0's backward ends the step
    places = [((FORWARD, 0), terms[0] - 50_000), ((FORWARD, 1), head), ((BACKWARD, 1), head)]
    _step(state, entry, probed=end, places=[*places, ((BACKWARD, 0), end)])
    assert state._probed_runs == (end, head)
    assert state._corrections == (30_000, -10_000) and state._correction == 30_000
    assert state.measured_peak == end
    now = state._offsets(state.last_step)  # what every later plan of this step starts from
    assert [a - b for a, b in zip(now, offsets)] == [30_000, -10_000]
    assert state._corrections_of((0, 0, 0)) == [30_000] * 3  # another step: the largest

    flat = _state(pair)  # no places: one constant, as before
    _step(flat, entry)
    predicted, _ = step_peak(range(2), flat.run_plan, flat._offsets(flat.last_step), flat._away)
    _step(flat, entry, probed=predicted + 4000)
    assert flat._correction == 4000 and flat._corrections_of((0, 0)) == [4000, 4000]


def test_a_plan_made_as_a_step_begins_counts_what_the_last_step_left(monkeypatch):
    """Optimizer states appear at the first optimizer step, after every read of that step:
    the step plan made as the next step begins counts what is allocated then beyond the last
    step's start (every run of the new step holds it), so it does not outgrow itself at once
    (on an H200 the FSDP2 Llama's first plan was 2.49 GB short: AdamW's states)."""
    import torch

    import memopt.state as st

    pair, left = 450_000, 30_000
    monkeypatch.setattr(st.PeakProbe, "start", lambda device: None)
    plans = []
    for grown in (0, left):
        state = _state(pair)
        now = [_static(state) + 1000]
        monkeypatch.setattr(st, "allocated", lambda device, now=now: (now[0], 0))
        cuda = torch.device("cuda")  # a device object only: nothing runs on it
        runs = [state.enter(0, cuda) for _ in range(2)]
        for pos in reversed(runs):
            state.backward_started(pos)
        now[0] += grown  # the optimizer step's states
        state.enter(0, cuda)  # the next step begins: the step just done is planned
        ahead = state._offsets(state.last_step, ahead=True)
        assert [a - b for a, b in zip(ahead, state._offsets(state.last_step))] == [grown] * 2
        c = state.step_choice
        assert c.peak == step_peak(range(2), c.chosen, ahead, state._away)[0]
        plans.append(c)
    assert plans[1].peak <= plans[1].target and plans[1].overhead_s >= plans[0].overhead_s
