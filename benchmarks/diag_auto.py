"""Why param_offload='auto' fails under FSDP2 + MixedPrecisionPolicy on CUDA: run param_peers'
memopt-auto variant with FSDP2's foreach_reduce wrapped; on a device mismatch print, per
FSDPParam of the failing group, where its shard, parameter and module attribute live.

    PYTHONPATH=. python benchmarks/diag_auto.py [--size 1b] [--no-mp]
"""

from __future__ import annotations

import argparse
import os
import sys

from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg

sys.path.insert(0, os.path.dirname(__file__))
import param_peers  # noqa: E402


def describe(fp) -> str:
    mi = fp._module_info
    attr = getattr(mi.module, mi.param_name)
    return (
        f"{type(mi.module).__name__}.{mi.param_name}: offload_to_cpu={fp.offload_to_cpu} "
        f"sharded_param={fp.sharded_param.device}/{fp.sharded_param._local_tensor.device} "
        f"data={fp._sharded_param_data.device} attr_is_sharded={attr is fp.sharded_param} "
        f"attr={attr.device} id={id(fp.sharded_param)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1b")
    ap.add_argument("--no-mp", action="store_true")
    a = ap.parse_args()
    inner = pg.foreach_reduce

    def wrapped(fsdp_params, *args, **kwargs):
        try:
            return inner(fsdp_params, *args, **kwargs)
        except RuntimeError:
            for fp in fsdp_params:
                print("  ", describe(fp), flush=True)
            raise

    pg.foreach_reduce = wrapped
    from memopt.params.fsdp import FsdpOffload

    grow = FsdpOffload.grow

    def grow_logged(self, plan, prefetch):
        moved = grow(self, plan, prefetch)
        print(f"grow: on_host={plan.on_host} prefetch={prefetch} moved={moved}", flush=True)
        for (name, mod), host in zip(self.groups, plan.on_host):
            group = getattr(mod, "_get_fsdp_state", None) and mod._get_fsdp_state()
            fps = group._fsdp_param_group.fsdp_params if group and group._fsdp_param_group else []
            print(
                f"  {name or '(root)'} host={host}", *(describe(fp) for fp in fps[:2]), sep="\n    "
            )
        return moved

    FsdpOffload.grow = grow_logged
    from memopt.params import _fsdp_compat as fc

    rehome, seen = fc.rehome, []

    def rehome_logged(p, local):
        if not seen:
            import weakref

            seen.append(1)
            print(
                f"rehome: {type(p).__name__} local {p._local_tensor.device} -> {local.device}; "
                f"use_count {p._use_count()} leaf {p.is_leaf} weakrefs {len(weakref.getweakrefs(p))} "
                f"dict {sorted(p.__dict__)} slots {getattr(type(p), '__slots__', None)}",
                flush=True,
            )
        rehome(p, local)
        if len(seen) == 1:
            seen.append(1)
            print(f"after: {p.device} {p._local_tensor.device} {id(p)}", flush=True)

    fc.rehome = rehome_logged
    if a.no_mp:
        param_peers._mp = lambda: None
    args = argparse.Namespace(
        name="memopt-auto", size=a.size, bs=2, seq=512, steps=4, cap_gib=3.5, fraction=1.0,
        options="",
    )  # fmt: skip
    try:
        res = param_peers.variant(args)
        print("ok", res["s_per_step"], res.get("auto"), flush=True)
    except RuntimeError as e:
        print("failed:", str(e)[:300], flush=True)


if __name__ == "__main__":
    main()
