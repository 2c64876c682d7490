"""DeepSpeed's rows of benchmarks/param_peers.py: ``ds-z2`` (ZeRO-Offload: stage 2 with the
optimizer offloaded to pinned host memory) and ``ds-z3`` (ZeRO-3 with parameters and optimizer
offloaded), run in one process without DeepSpeed's launcher (see param_peers.py's docstring).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import torch

GiB = 2**30


# ZeRO-3's defaults (live parameters and reuse distance 1e9, a 5e8-element gradient bucket) would
# keep every layer whose recompute comes within 1e9 parameters of its forward gathered in between
# (by that rule about the last half of the 1b model's layers, ~1 GB in bf16) and allocate a 1 GB
# bucket on the GPU (estimates read from the source, not measured); the usual advice for a ZeRO-3
# OOM is to lower these.
DS_Z3_FIT = {
    "stage3_max_live_parameters": 10**8,
    "stage3_max_reuse_distance": 10**8,
    "reduce_bucket_size": 5 * 10**7,
}


def ds_config(name: str, args, options: dict) -> dict:
    """DeepSpeed config of ``ds-z2`` / ``ds-z3``; ``options`` (``ds-z3+KEY=VALUE``) sets
    zero_optimization keys."""
    pinned = {"device": "cpu", "pin_memory": True}
    zero = {"stage": 2, "offload_optimizer": dict(pinned)}
    if name == "ds-z3":
        zero.update(stage=3, offload_param=dict(pinned), **DS_Z3_FIT)
    adamw = {"lr": 1e-4, "weight_decay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8}
    cfg = {
        "train_micro_batch_size_per_gpu": args.bs,
        "gradient_accumulation_steps": args.accum,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": adamw},  # DeepSpeedCPUAdam(adamw_mode=True)
        "zero_optimization": zero,
        "steps_per_print": 1 << 30,
    }
    for key, val in options.items():  # ds-z3+stage3_max_live_parameters=1e9
        try:
            val = json.loads(val) if isinstance(val, str) else val  # 1e9, true; else a string
        except ValueError:
            pass
        val = int(val) if isinstance(val, float) and val.is_integer() else val
        if key == "torch_adam":  # torch's AdamW on the host shards: no cpu_adam build
            adamw["torch_adam"] = bool(val)
            cfg["zero_force_ds_cpu_optimizer"] = not val
        else:
            zero[key] = val
    if args.clip:
        cfg["gradient_clipping"] = args.clip
    return cfg


class _DSEngine:
    """A DeepSpeed engine behind the optimizer calls one() makes: ``backward`` per micro-batch
    (non-boundary micro-batches also get DeepSpeed's bookkeeping ``engine.step()``), ``step`` at
    the boundary (clipping, the host AdamW and zeroing the gradients all happen inside)."""

    autocast = False  # bf16 mode: the weights are bf16 and the engine turns autocast off inside

    def __init__(self, engine):
        self.engine = engine

    def backward(self, loss) -> None:
        self.engine.backward(loss, scale_wrt_gas=False)  # one() already divides by the accum
        if not self.engine.is_gradient_accumulation_boundary():
            self.engine.step()

    def clip_grad_norm_(self, max_norm: float) -> None:
        """Nothing: ``gradient_clipping`` in the config clips inside ``engine.step()``."""

    def step(self) -> None:
        self.engine.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing: ``engine.step()`` zeroed the gradients."""


def setup(name: str, model, args, options: dict, cap: Callable[[], None] | None):
    """``deepspeed.initialize`` on the built model, world size 1 without the launcher; ``cap``
    caps the GPU (None: uncapped). Returns (engine, optimizer calls, extra report dict)."""
    import socket

    import deepspeed

    with socket.socket() as sock:  # a free port for the one-rank NCCL group's TCP store
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    for key, val in {**env, "MASTER_PORT": str(port)}.items():
        os.environ.setdefault(key, val)
    cfg = ds_config(name, args, options)
    if cap is not None:
        # ZeRO-3 partitions the model in deepspeed.initialize: it casts the parameters to bf16,
        # moves the module to the GPU (2.1 GB, within the cap) and partitions it to the host
        model.cpu()
        cap()
    deepspeed.init_distributed(dist_backend="nccl")
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    cfg_used = json.loads(json.dumps(cfg))
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=cfg
    )
    torch.cuda.synchronize()
    extra = {"deepspeed": deepspeed.__version__, "ds_config": cfg_used}
    extra["ds_optimizer"] = type(engine.basic_optimizer).__name__
    extra["ds_zero_optimizer"] = type(engine.optimizer).__name__
    extra["init_s"] = time.perf_counter() - t0
    extra["init_peak_gib"] = torch.cuda.max_memory_allocated() / GiB  # deepspeed.initialize's
    extra["autocast"] = _DSEngine.autocast
    torch.cuda.reset_peak_memory_stats()  # the rows' peak: training only
    return engine, _DSEngine(engine), extra
