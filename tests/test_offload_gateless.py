"""Conv nets in the offload rewrite and the budget planner. Layers without a matmul (conv-only
blocks) cannot order offload copies inside themselves: the rewrite keeps them on the device
and says why, and the budget planner does not offer them (on an H100, ResNet-50's stages
offloaded anyway cost +404%: every copy queued at the classifier's matmul). The planner's
memory model holds Inductor's channels-last copies of conv inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import memopt


class ConvBlock(nn.Module):
    def __init__(self, c: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.norm = nn.BatchNorm2d(c)

    def forward(self, x):
        return x + torch.relu(self.norm(self.conv(x)))


class ConvNet(nn.Module):
    def __init__(self, n: int = 3, c: int = 8):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.blocks = nn.ModuleList(ConvBlock(c) for _ in range(n))
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean((2, 3))).pow(2).mean()


def _grads(compiled, model, x):
    model.zero_grad()
    compiled(x).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_conv_layers_stay_on_the_device_with_the_reason(caplog):
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = ConvNet()
    ref = _grads(torch.compile(model), model, x)
    torch._dynamo.reset()
    opt = memopt.optimize(model, offload_layers=2, offload_min_bytes=0)
    with caplog.at_level("WARNING", logger="memopt"):
        for _ in range(2):
            got = _grads(opt, model, x)
    # the user's setting moved nothing: a warning says so and why, never a silent no-op
    said = [r.getMessage() for r in caplog.records if "offloaded nothing" in r.getMessage()]
    assert said == [
        "memopt offload: offload_layers=2 offloaded nothing in this region: 8 saved "
        "tensor(s): layer N has no matmul in its forward and backward to order its copies by "
        "(a conv-only block): offloading would queue every copy at the graph's next matmul, "
        "serialized with compute. Use a budget or level= recompute for such layers instead."
    ]
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    rep = memopt.report(opt)
    assert rep.offloaded_bytes() == 0
    table = rep.table()
    assert "layer 0 has no matmul in its forward and backward to order its copies by" in table
    assert "layer 1 has no matmul" in table
    assert "offload_layers=2 offloaded nothing in this region" in table


def test_tensors_under_min_bytes_warn_with_the_setting_to_change(caplog):
    torch.manual_seed(0)
    model = ConvNet()
    opt = memopt.optimize(model, offload_layers=1)  # the default min_bytes: 1 MiB
    with caplog.at_level("WARNING", logger="memopt"):
        opt(torch.randn(4, 3, 16, 16)).backward()
    said = [r.getMessage() for r in caplog.records if "offloaded nothing" in r.getMessage()]
    assert len(said) == 1 and "fewer bytes than min_bytes=1048576" in said[0]
    assert said[0].endswith("A smaller offload_min_bytes lets smaller tensors move.")


@pytest.fixture(scope="module")
def budget_problem():
    """One budget=0.5 compile of the ConvNet with offload_min_bytes=0 (every tensor big enough
    to offer), for the two tests on its planning problem: the planner's problem (with the
    channels-last copies), the same problem built without them, and the copies."""
    import memopt.passes.plan_budget as pb

    seen = []
    real = pb.build_planning_problem

    def spy(*args, **kwargs):
        with_copies = real(*args, **kwargs)
        without = real(*args, **{**kwargs, "layout_copies": ()})
        seen.append((with_copies, without, kwargs["layout_copies"]))
        return with_copies

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pb, "build_planning_problem", spy)
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = ConvNet()
        opt = memopt.optimize(model, budget=0.5, offload_min_bytes=0)
        opt(torch.randn(4, 3, 16, 16)).backward()
    torch._dynamo.reset()
    return seen[0]


def test_the_budget_planner_does_not_offer_conv_layers_for_offload(budget_problem):
    cands = budget_problem[0].candidates
    assert any(c.layer is not None for c in cands)
    assert not any(c.offloadable for c in cands)


def test_the_planner_counts_inductors_channels_last_copies(budget_problem):
    """The budget planner's memory model holds the channels-last copies Inductor saves of conv
    inputs (the image, every 4-D weight), as the level-0 estimate does: here 8x3x3x3 +
    4x3x16x16 + 3 x 8x8x3x3 fp32 = 864 + 12,288 + 6,912 = 20,064 bytes more at the peak
    (ResNet-50 on the H100: the planner under-predicted its peak by 10-15%)."""
    from memopt.planner import memory_profile

    problem, without, copies = budget_problem
    shapes = sorted(tuple(c.meta["val"].shape) for c in copies)
    assert shapes == [(4, 3, 16, 16), (8, 3, 3, 3), (8, 8, 3, 3), (8, 8, 3, 3), (8, 8, 3, 3)]
    assert memory_profile(problem, {}).peak - memory_profile(without, {}).peak == 20_064
    assert problem.timeline.bwd_live_bytes[0] - without.timeline.bwd_live_bytes[0] == 20_064


class Stage(nn.Module):
    def __init__(self, n: int, c: int = 8):
        super().__init__()
        self.layers = nn.ModuleList(ConvBlock(c) for _ in range(n))

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        return x


class StagedNet(ConvNet):
    """ResNet's nesting: stages of blocks; the layers are the outermost container's."""

    def __init__(self, c: int = 8):
        super().__init__(n=0, c=c)
        self.stages = nn.ModuleList(Stage(n, c) for n in (3, 4, 3))
        del self.blocks

    def forward(self, x):
        x = self.stem(x)
        for s in self.stages:
            x = s(x)
        return self.head(x.mean((2, 3))).pow(2).mean()


def test_nested_layer_containers_count_the_outermost_before_compiling():
    from memopt.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"offload_layers=3 must be below the number of layers \(3"
    ):
        memopt.optimize(StagedNet(), offload_layers=3)
    memopt.optimize(StagedNet(), offload_layers=2)  # the stages: 3 layers
