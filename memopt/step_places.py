"""What the step model misses, run by run: the bytes outside every region's model as each run
runs, read from the allocator, and the corrections a measured step gives each run.

Plain data (no torch). The step model (:mod:`memopt.step`) predicts, per run, what earlier
runs hold plus the run's own peak plus its *offset*: the bytes no region's model holds
(parameters of other layers, optimizer states, the batch, the sharding engine's gradients),
read as each run's forward and backward began (:func:`outside_bytes`), plus a *correction*,
what the measurement showed beyond that. One constant correction for the whole step holds
while a plan changes nothing the step's places differ in; an FSDP2 step peaks at its end (the
bottom layer's backward and the optimizer step, where the reduced gradients of every layer
are held) and a plan that offloads lowers the head's memory, not the end's (docs/benchmarks.md,
thirtieth session: such a plan was predicted 49.5 MB low). So a probed step is cut at the run
hooks (:meth:`memopt.peak_probe.PeakProbe.mark`) and each run gets its own correction
(:func:`place_corrections`): the measured peak of its places less its predicted term.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

#: The labels of a run's places: its forward (from its start to the next hook) and its
#: backward (from its backward's start to the next hook, for run 0 the step's end: the
#: optimizer step included).
FORWARD, BACKWARD = "forward", "backward"


def run_peaks(places: Sequence[tuple[Hashable, int]] | None, runs: int) -> tuple[int, ...] | None:
    """Per run position, the largest peak of its places (labels ``(FORWARD, i)`` and
    ``(BACKWARD, i)``); None unless every run has a place and every place is a run's."""
    if places is None:
        return None
    out: list[int | None] = [None] * runs
    for label, peak in places:
        if not (isinstance(label, tuple) and len(label) == 2 and 0 <= label[1] < runs):
            return None
        i = label[1]
        out[i] = peak if out[i] is None else max(out[i], peak)
    return None if any(v is None for v in out) else tuple(out)  # type: ignore[arg-type]


def outside_bytes(
    entry: Sequence[int],
    bwd_entry: Mapping[int, int],
    saved: Sequence[int],
    moved: Sequence[int],
    static: Sequence[int],
    away: Mapping[int, Sequence[int]],
) -> list[int]:
    """Per run, the bytes allocated that no region's model holds: as the run began
    (``entry``) less what earlier runs held (``saved``; those away less their ``moved`` bytes)
    and the run's own inputs (``static``); or as its backward began (``bwd_entry``), less its
    own saved bytes too (gradients and the sharding engine's buffers of the backward are
    outside every region), whichever is larger, never negative."""
    out, held = [], 0
    for i in range(len(entry)):
        held_i = held - sum(moved[j] for j in away.get(i, ()))
        fwd = entry[i] - held_i - static[i]
        bwd = bwd_entry.get(i, 0) - held_i - saved[i] - static[i]
        out.append(max(0, fwd, bwd))
        held += saved[i]
    return out


def place_corrections(
    corrections: Sequence[int], terms: Sequence[int], measured: Sequence[int]
) -> tuple[int, ...]:
    """Each run's correction once its places were measured: the old one plus the measured
    peak of its places less the predicted term it was part of (the prediction then equals the
    measurement at every run)."""
    return tuple(c + m - t for c, m, t in zip(corrections, measured, terms, strict=True))
