"""Progress lines of ``memopt plan`` / ``memopt fit``: when they print and what they say."""

from __future__ import annotations

import io

from memopt.cli.progress import Progress, reporting
from memopt.planner import progress as planner_progress


def test_a_phase_prints_after_the_delay_then_every_interval(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr("memopt.cli.progress.time.monotonic", lambda: now[0])
    out = io.StringIO()
    p = Progress("plan", out, after_s=2.0, every_s=10.0)
    p.phase("tracing")
    for t in (101.0, 102.0, 103.0, 111.9, 112.0):
        now[0] = t
        p.tick()
    assert out.getvalue().splitlines() == [
        "memopt plan: tracing (2 s)",
        "memopt plan: tracing (12 s)",
    ]


def test_planner_messages_switch_to_planning_and_back(monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr("memopt.cli.progress.time.monotonic", lambda: now[0])
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
        "memopt plan: planning (0 s): lead 1: fits, overhead 1.000 ms",
        "memopt plan: tracing, after the planner (0 s)",
        "memopt plan: tracing, after the planner (0 s)",
    ]
    assert set(p.seconds) == {"tracing", "planning", "tracing, after the planner"}


def test_off_when_not_asked_and_stderr_is_not_a_terminal(capsys) -> None:
    with reporting("plan", None) as p:
        p.phase("tracing")
        planner_progress.note("solving: 3 candidates")
    assert capsys.readouterr().err == ""
    assert planner_progress._listener.get() is None
