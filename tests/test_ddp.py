"""memopt under DistributedDataParallel (gloo, world size 2): dynamo's DDP graph split
compiles the model as one region per bucket and runs each piece on fake tensors while it
compiles, which memopt counted as step runs without a backward (a wrong note, and a step
planned with phantom runs); a user offload setting cannot name the model's layers in
bucket-cut regions and is said, not applied per region (it raised "must be below the number of
layers (1)" in the bucket holding one layer). Losses and gradients are eager DDP's (to float
tolerance: the reference is eager, to keep the test to one compile per rank)."""

from __future__ import annotations

import logging

import torch

from tests.helpers import spawn_gloo, tiny_llama


def _train(kind: dict | None, rank: int) -> tuple[list[float], dict, object]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    import memopt

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = tiny_llama(hidden_size=128, intermediate_size=768, num_hidden_layers=1)
    ddp = DDP(model, bucket_cap_mb=1)  # 1.4 MiB of weights in one layer: two buckets, two regions
    run = ddp if kind is None else memopt.optimize(ddp, **kind)
    gen, losses = torch.Generator().manual_seed(rank), []
    for _ in range(2):
        ids = torch.randint(1, 128, (2, 32), generator=gen)
        loss = run(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(loss.item())
    return losses, {n: p.grad.clone() for n, p in model.named_parameters()}, run


def _checks(rank: int, tmp: str) -> None:
    import memopt

    want_losses, want, _ = _train(None, rank)
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
    logging.getLogger("memopt").addHandler(handler)
    losses, got, run = _train({"budget": 0.5, "offload_layers": 1}, rank)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    for name, g in want.items():
        torch.testing.assert_close(got[name], g, rtol=1e-4, atol=1e-6, msg=name)
    rep = memopt.report(run)
    assert rep.step is not None and len(rep.step.sequence) == 2  # the buckets, no phantom run
    assert not any("without a backward" in m for m in records), records
    assert any("one of DistributedDataParallel's buckets" in m for m in records)
    assert rep.offloaded_bytes() == 0
    before, after = rep.saved_bytes()
    assert after < before and rep.step.target is not None  # a step plan over both buckets


def test_ddp_graph_split_regions_train_as_ddp_with_torch_compile():
    spawn_gloo(_checks)
