"""The per-layer diagram and the bytes in flight for a sync dict (plain data)."""

import json

from memopt.offload.sync import build_schedule, default_sync
from memopt.offload.timeline import (
    format_bytes,
    render_diagram,
    render_timeline,
    timeline_dict,
    timeline_rows,
)

MiB = 1 << 20

N5_K2 = """\
->  ■ . . . .  (forward pass starts)
->  X ■ . . .
->  X X ■ . .
->  _ X X ■ .
->  _ _ X X ■
<-  _ _ X X ■  (backward pass starts)
<-  _ X X ■ .
<-  X X ■ . .
<-  X ■ . . .
<-  ■ . . . ."""

N9_K3 = """\
->  ■ . . . . . . . .  (forward pass starts)
->  X ■ . . . . . . .
->  X X ■ . . . . . .
->  X X X ■ . . . . .
->  X X X X ■ . . . .
->  X X X X X ■ . . .
->  _ X X X X X ■ . .
->  _ _ X X X X X ■ .
->  _ _ _ X X X X X ■
<-  _ _ _ X X X X X ■  (backward pass starts)
<-  _ _ X X X X X ■ .
<-  _ X X X X X ■ . .
<-  X X X X X ■ . . .
<-  X X X X ■ . . . .
<-  X X X ■ . . . . .
<-  X X ■ . . . . . .
<-  X ■ . . . . . . .
<-  ■ . . . . . . . ."""


def test_diagram_n5_k2():
    assert render_diagram(build_schedule(default_sync(5, 2), 5)) == N5_K2


def test_diagram_n9_k3():
    assert render_diagram(build_schedule(default_sync(9, 3), 9)) == N9_K3


def test_bytes_on_gpu_and_in_flight_n5_k2():
    rows = timeline_rows(build_schedule(default_sync(5, 2), 5), {i: MiB for i in range(5)})
    assert [r.on_gpu // MiB for r in rows] == [1, 2, 3, 3, 3, 3, 3, 3, 2, 1]
    # layer 0's copy runs from its forward until layer 3 begins, layer 1's until layer 4
    assert [r.d2h_in_flight // MiB for r in rows] == [1, 2, 2, 1, 0, 0, 0, 0, 0, 0]
    # layer 1 is reloaded when layer 3's backward begins and used when its own begins
    assert [r.h2d_in_flight // MiB for r in rows] == [0, 0, 0, 0, 0, 0, 1, 2, 1, 0]
    # at most n - k layers' activations are on the GPU at once
    assert max(r.on_gpu for r in rows) == 3 * MiB


def test_timeline_table_n5_k2():
    text = render_timeline(build_schedule(default_sync(5, 2), 5), {i: MiB for i in range(5)})
    lines = text.splitlines()
    assert lines[0].startswith("■ executing   X activations on the GPU")
    assert lines[2] == "->     0     0  ■ . . . .    1.00 MiB       1.00 MiB            0 B"
    assert lines[8] == "<-     6     3  _ X X ■ .    3.00 MiB            0 B       1.00 MiB"
    assert lines[-1] == "peak on GPU at a layer: 3.00 MiB"
    assert len(lines) == 2 + 10 + 1


def test_timeline_counts_layers_without_bytes():
    text = render_timeline(build_schedule(default_sync(5, 2), 5))
    assert "->     1     1  X ■ . . .    2 layers       2 layers       0 layers" in text


def test_offload_in_backward_and_reload_in_forward():
    # layer 0: kept on the GPU into the backward, freed when layer 3's backward starts;
    # layer 1: offloaded when layer 2 begins, reloaded when layer 4 begins (still forward).
    sched = build_schedule({0: (False, 1, False, 2), 1: (True, 2, True, 4)}, 5)
    cells = ["".join(r.cells) for r in timeline_rows(sched)]
    assert cells == [
        "■....",
        "X■...",
        "X_■..",
        "X_X■.",
        "XXXX■",
        "XXXX■",
        "_XX■.",
        "XX■..",
        "X■...",
        "■....",
    ]
    rows = timeline_rows(sched)
    assert [r.d2h_in_flight for r in rows] == [1, 2, 1, 1, 1, 1, 0, 0, 0, 0]
    assert [r.h2d_in_flight for r in rows] == [0, 0, 0, 0, 1, 0, 0, 1, 1, 0]


def test_timeline_dict_is_json():
    d = timeline_dict(build_schedule(default_sync(5, 2), 5), {i: MiB for i in range(5)})
    assert d["sync"] == {"0": [True, 3, False, 2], "1": [True, 4, False, 1]}
    assert d["rows"][3] == {
        "pass": "forward",
        "layer": 3,
        "cells": "_XX■.",
        "on_gpu": 3 * MiB,
        "d2h_in_flight": MiB,
        "h2d_in_flight": 0,
    }
    json.dumps(d)


def test_format_bytes():
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 * MiB) == "3.00 MiB"
    assert format_bytes(5 << 30) == "5.00 GiB"
