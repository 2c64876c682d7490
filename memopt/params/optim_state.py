"""CPUAdamW state dicts in torch.optim.AdamW's format, so either optimizer loads the other's.

Per parameter index: ``step`` (a float tensor), ``exp_avg``, ``exp_avg_sq`` (fp32, the
parameter's shape) and, from CPUAdamW only, ``master_param`` (the fp32 weights). A parameter that
was never stepped has no entry, as in torch.
"""

from __future__ import annotations

import torch


def pack_state(opt) -> dict[int, dict[str, torch.Tensor]]:
    state, k = {}, 0
    for gi, group in enumerate(opt.param_groups):
        m, v = opt.from_flats(gi, "exp_avg"), opt.from_flats(gi, "exp_avg_sq")
        master = opt._flats[gi]["master"]
        for p in group["params"]:
            info = opt._infos[id(p)]
            sl = slice(info.offset, info.offset + info.numel)
            if info.step > 0:
                state[k] = {
                    "step": torch.tensor(float(info.step)),
                    "exp_avg": m[sl].clone().view(p.shape),
                    "exp_avg_sq": v[sl].clone().view(p.shape),
                    "master_param": master[sl].clone().view(p.shape),
                }
            k += 1
    return state


def load_state(opt, state_dict: dict) -> None:
    """Copy ``state_dict`` into ``opt``'s flat buffers (and NVMe files) and hyperparameters."""
    groups = state_dict["param_groups"]
    if len(groups) != len(opt.param_groups) or any(
        len(a["params"]) != len(b["params"]) for a, b in zip(groups, opt.param_groups)
    ):
        raise ValueError("the state dict's parameter groups do not match this optimizer's")
    state, k = state_dict["state"], 0
    for gi, (saved, group) in enumerate(zip(groups, opt.param_groups)):
        for key, val in saved.items():
            if key != "params":
                group[key] = val
        m, v = opt.from_flats(gi, "exp_avg"), opt.from_flats(gi, "exp_avg_sq")
        for p in group["params"]:
            info = opt._infos[id(p)]
            sl = slice(info.offset, info.offset + info.numel)
            st = state.get(k, state.get(str(k)))
            k += 1
            if st is None:
                info.step = 0
                m[sl].zero_()
                v[sl].zero_()
                continue
            if st["exp_avg"].numel() != info.numel:
                raise ValueError(
                    f"state of parameter {k - 1} has {st['exp_avg'].numel()} "
                    f"elements, the parameter {info.numel}"
                )
            info.step = int(st["step"])
            m[sl].copy_(st["exp_avg"].reshape(-1))
            v[sl].copy_(st["exp_avg_sq"].reshape(-1))
            if "master_param" in st:
                opt._flats[gi]["master"][sl].copy_(st["master_param"].reshape(-1))
                opt._write_back(info)
        store, total = opt._stores[gi], opt._flats[gi]["master"].numel()
        if store is not None:
            store.write(0, m).result()
            store.write(total * 4, v).result()
