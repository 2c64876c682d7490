"""Placement rows for the memory report: where parameters and optimizer state live.

The report is a value: :func:`placement_rows` returns dicts, :func:`format_placement` a string.
Consecutive layers with the same bytes and placement fold into one row (``layers.0-4``).
"""

from __future__ import annotations


def placement_rows(handle=None, optimizer=None) -> list[dict]:
    """Rows ``{name, kind, param_bytes, where, ...}`` from an FSDP2 offload record
    (:class:`memopt.params.FsdpOffload`) and/or an optimizer with ``placement_rows``
    (:class:`memopt.params.HostAdamW`)."""
    rows: list[dict] = []
    if handle is not None:
        rows += handle.placement_rows()
    if optimizer is not None:
        rows += optimizer.placement_rows()
    return rows


def optimizer_rows(param_groups, state, keys, on_disk, grad_buffer_bytes: int = 0) -> list[dict]:
    """Per parameter group of an optimizer: the bytes of its state ``keys`` (fp32 master,
    moments) by where they live, pinned or not; moments in an NVMe file (``on_disk``: holds the
    ids of those parameters) as ``disk`` rows; then the fp32 gradient buffers of 16-bit host
    shards (pageable host bytes) when there are any."""
    from memopt.params._fsdp_compat import local

    rows = []
    for gi, group in enumerate(param_groups):
        acc: dict[tuple[str, str], list[int]] = {}
        for p in group["params"]:
            if id(p) in on_disk:
                acc.setdefault(("exp_avg+exp_avg_sq", "disk"), [0, 0])[0] += 8 * local(p).numel()
            for key in keys:
                t = state[p].get(key)
                if t is None:
                    continue
                t = local(t)
                where = "cpu" if t.device.type == "cpu" else "gpu"
                name = "fp32 master" if key == "master_param" else "exp_avg+exp_avg_sq"
                row = acc.setdefault((name, where), [0, 1])
                row[0] += t.numel() * t.element_size()
                row[1] &= int(t.is_pinned() or where != "cpu")
        for (name, where), (nbytes, pinned) in acc.items():
            row = {"name": f"optimizer group {gi}: {name}", "kind": "optimizer"}
            row.update(param_bytes=nbytes, where=where, slot=None)
            rows.append({**row, "pinned": bool(pinned) and where == "cpu"})
    if grad_buffer_bytes:
        name = "fp32 gradient buffers (bf16 host shards)"
        rows.append(dict(name=name, kind="optimizer", param_bytes=grad_buffer_bytes, where="cpu"))
        rows[-1].update(pinned=False, slot=None)
    return rows


def _fold(rows: list[dict]) -> list[tuple[str, dict, int]]:
    out: list[tuple[str, dict, int]] = []
    for r in rows:
        key = (r["kind"], r["param_bytes"], r["where"])
        if out and r["kind"] == "layer" and out[-1][1]["kind"] == "layer":
            first, prev, n = out[-1]
            if (prev["kind"], prev["param_bytes"], prev["where"]) == key:
                out[-1] = (first, r, n + 1)
                continue
        out.append((r["name"], r, 1))
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:10.2f}"


def format_placement(rows: list[dict]) -> str:
    """A fixed-width table: name, count, MiB each, where; then GPU / CPU / disk totals, the
    host bytes pinned and pageable, and note rows (the automatic placement's choice)."""
    notes = [r["name"] for r in rows if r["kind"] == "note"]
    rows = [r for r in rows if r["kind"] != "note"]
    lines = [f"{'parameters / optimizer state':<36} {'count':>5} {'MiB each':>10}  where"]
    totals = {"gpu": 0, "cpu": 0, "disk": 0}
    pinned = 0
    for r in rows:
        pinned += r["param_bytes"] if r["where"] == "cpu" and r.get("pinned") else 0
    for first, last, n in _fold(rows):
        name = first if n == 1 else f"{first}..{last['name'].rsplit('.', 1)[-1]}"
        lines.append(f"{name:<36} {n:>5} {_mib(last['param_bytes'])}  {last['where']}")
        totals[last["where"]] = totals.get(last["where"], 0) + n * last["param_bytes"]
    lines.append("total MiB: " + ", ".join(f"{k} {v / 2**20:.2f}" for k, v in totals.items()))
    lines[-1] += (
        f" (cpu pinned {pinned / 2**20:.2f}, pageable {(totals['cpu'] - pinned) / 2**20:.2f})"
    )
    return "\n".join(lines + notes)
