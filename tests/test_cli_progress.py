"""Progress of ``memopt plan`` / ``memopt fit`` / the demo: when it draws, what it says, where.

Lines without a terminal (or without tqdm), tqdm bars on a terminal; never on stdout.
"""

from __future__ import annotations

import io
import re
import sys
import time

import pytest

from memopt.cli import progress
from memopt.cli.progress import Progress, reporting
from memopt.planner import progress as planner_progress


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    """One fake clock for memopt's phases and tqdm's bars."""
    now = [100.0]
    monkeypatch.setattr("memopt.cli.progress.time.monotonic", lambda: now[0])
    monkeypatch.setattr("tqdm.std.time", lambda: now[0])
    return now


def frames(text: str) -> list[str]:
    """What a terminal shows in turn: each redraw (``\\r``) or line, trailing blanks cut."""
    return [f.rstrip() for f in re.split(r"[\r\n]", text) if f.strip()]


def test_a_phase_prints_after_the_delay_then_every_interval(clock) -> None:
    out = io.StringIO()
    p = Progress("plan", out, after_s=2.0, every_s=10.0)
    p.phase("tracing")
    for t in (101.0, 102.0, 103.0, 111.9, 112.0):
        clock[0] = t
        p.tick()
    assert out.getvalue().splitlines() == [
        "memopt plan: tracing (2 s)",
        "memopt plan: tracing (12 s)",
    ]


def test_planner_messages_switch_to_planning_and_back(clock) -> None:
    clock[0] = 0.0
    out = io.StringIO()
    p = Progress("plan", out, after_s=0.0)
    with planner_progress.listening(p._planner_note):
        p.phase("tracing")
        planner_progress.note("solving: 3 candidates, offload leads [1]")
        planner_progress.note("lead 1: fits, overhead 1.000 ms")
        p.tick()
        planner_progress.note("solved: overhead 1.000 ms (bound 0.500 ms)")
        p.tick()
        planner_progress.note("solving: 3 candidates, offload leads [1]")  # a second solve
        planner_progress.note("solved: overhead 1.000 ms (bound 0.500 ms)")
        p.tick()
    assert out.getvalue().splitlines() == [
        "memopt plan: planning (0 s, 1 leads): lead 1: fits, overhead 1.000 ms",
        "memopt plan: tracing, after the planner (0 s)",
        "memopt plan: tracing, after the planner (0 s)",
    ]
    assert set(p.seconds) == {"tracing", "planning", "tracing, after the planner"}


def test_lines_count_and_rate_of_a_counted_phase(clock) -> None:
    out = io.StringIO()
    p = Progress("fit", out, after_s=2.0, every_s=10.0)
    with planner_progress.listening(p._planner_note):
        p.phase("planning at each batch size", unit="sizes", solves=True)
        for t in (101.0, 102.0, 103.0, 104.0):
            clock[0] = t
            planner_progress.note("solving: 5 candidates")  # stays in the phase
            planner_progress.note("solved: overhead 1.000 ms (bound 0.500 ms)")
            p.tick()
        planner_progress.advance(6)  # e.g. a trace's regions
        clock[0] = 114.0
        p.tick()
    assert out.getvalue().splitlines() == [
        "memopt fit: planning at each batch size (2 s, 2 sizes, 1.0/s): "
        "solved: overhead 1.000 ms (bound 0.500 ms)",
        "memopt fit: planning at each batch size (14 s, 10 sizes, 0.7/s): "
        "solved: overhead 1.000 ms (bound 0.500 ms)",
    ]


def test_bars_on_a_terminal_spinner_then_counted_bar(clock) -> None:
    out = FakeTTY()
    p = Progress("plan", out, bars=True)
    assert p.bars is not None
    with planner_progress.listening(p._planner_note):
        p.phase("tracing")
        for t in (101.0, 102.0, 103.0, 104.5):  # nothing for 2 s, then a spinner
            clock[0] = t
            p.tick()
        planner_progress.note("solving: 520 candidates")
        for t, lead in ((105.0, 1), (106.5, 2), (107.5, 3)):
            clock[0] = t
            planner_progress.note(f"lead {lead}: fits, overhead 1.000 ms")
            p.tick()
        planner_progress.note("solved: overhead 1.000 ms (bound 0.500 ms)")
        clock[0] = 108.5
        p.phase(None)
    assert frames(out.getvalue()) == [
        "memopt plan: tracing / [00:02]",
        "memopt plan: tracing - [00:03]",
        "memopt plan: tracing \\ [00:04]",
        "memopt plan: tracing [00:04]",  # left on screen, without the spinner
        "memopt plan: planning: 2 leads [00:02,  1.00 leads/s, lead 2: fits, overhead 1.000 ms]",
        "memopt plan: planning: 3 leads [00:03,  1.00 leads/s, lead 3: fits, overhead 1.000 ms]",
        "memopt plan: planning: 3 leads [00:03,  1.00 leads/s, lead 3: fits, overhead 1.000 ms]",
        "memopt plan: planning: 3 leads [00:03,  1.00 leads/s, solved: overhead 1.000 ms "
        "(bound 0.500 ms)]",  # left on screen when the solve ends
    ]
    assert out.getvalue().endswith("]\n")  # "tracing, after the planner": 1 s, not drawn


def test_a_bar_with_a_total_shows_the_fraction(clock) -> None:
    out = FakeTTY()
    p = Progress("demo", out, bars=True)
    p.phase("regions", unit="regions", total=4)
    p.advance(3)
    clock[0] = 103.0
    p.tick()
    p.phase(None)
    assert frames(out.getvalue())[0] == (
        "memopt demo: regions:  75%|#######5  | 3/4 [00:03<00:01,  1.00 regions/s]"
    )


def test_off_when_not_asked_and_stderr_is_not_a_terminal(capsys) -> None:
    with reporting("plan", None) as p:
        p.phase("tracing")
        planner_progress.note("solving: 3 candidates")
    assert capsys.readouterr() == ("", "")
    assert planner_progress._listener.get() is None


def test_asked_without_a_terminal_draws_lines(capsys) -> None:
    with reporting("plan", True) as p:
        assert p.bars is None and planner_progress._listener.get() is not None
    assert capsys.readouterr() == ("", "")  # under 2 s: nothing at all


@pytest.mark.parametrize("tqdm_installed", [True, False])
def test_a_terminal_gets_bars_or_lines_on_stderr_only(
    capsys, monkeypatch, clock, tqdm_installed
) -> None:
    if not tqdm_installed:
        monkeypatch.setattr(progress, "tqdm_class", lambda: None)
    err = FakeTTY()
    monkeypatch.setattr(sys, "stderr", err)
    with reporting("plan", None) as p:
        assert (p.bars is not None) == tqdm_installed
        p.phase("tracing")
        clock[0] += 3.0
        deadline = time.perf_counter() + 5.0
        while not err.getvalue() and time.perf_counter() < deadline:
            time.sleep(0.05)  # the heartbeat thread draws
        clock[0] += 1.0
    shown = frames(err.getvalue())
    if tqdm_installed:
        assert re.fullmatch(r"memopt plan: tracing [|/\\-] \[00:03\]", shown[0])
        assert shown[-2] == "memopt plan: tracing [00:04]"
    else:
        assert shown[0] == "memopt plan: tracing (3 s)"
    assert re.fullmatch(r"memopt plan: CPU time tracing \d+\.\d s", shown[-1])
    assert capsys.readouterr().out == ""


def test_tracing_counts_regions_across_the_planner(clock) -> None:
    """Each region compiled counts, also those compiled after a planner solve."""
    clock[0] = 0.0
    out = io.StringIO()
    p = Progress("plan", out, after_s=0.0)
    with planner_progress.listening(p._planner_note):
        p.phase("tracing", unit=progress.REGIONS)
        planner_progress.traced()
        planner_progress.traced()
        clock[0] = 2.0
        p.tick()
        planner_progress.note("solving: 3 candidates")
        planner_progress.traced()  # counted, though the planning phase counts leads
        planner_progress.note("solved: overhead 1.000 ms (bound 0.500 ms)")
        planner_progress.traced()
        clock[0] = 4.0
        p.tick()
        p.phase("reporting")
        planner_progress.traced()  # counted in no phase
    assert out.getvalue().splitlines() == [
        "memopt plan: tracing (2 s, 2 regions, 1.0/s)",
        "memopt plan: tracing, after the planner (2 s, 4 regions, 2.0/s)",
    ]
    assert p._traced == 5


def test_each_compiled_region_is_traced_once() -> None:
    """memopt's state tells the listener of every region it plans (a graph break: two)."""
    import torch

    import memopt

    class TwoRegions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            x = self.a(x).relu()
            torch._dynamo.graph_break()
            return self.b(x).relu().sum()

    torch._dynamo.reset()
    seen = []
    model = TwoRegions()
    with planner_progress.listening(seen.append):
        memopt.optimize(model, level=1)(torch.randn(4, 8, requires_grad=True)).backward()
    rep = memopt.report(model)
    assert len(rep.regions) == 2
    assert sum(isinstance(m, planner_progress.Traced) for m in seen) == 2
