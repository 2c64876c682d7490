"""A compiled region without ops (torch 2.14 folds a lone ``y * 1.0`` after a graph break away:
the forward graph is an input and an output) still gives the budget planner a step to plan."""

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from memopt.passes.build_planning_problem import build_planning_problem
from memopt.planner import memory_profile, solve
from memopt.planner.costs import CPU_DEFAULTS, roofline_s


def _passthrough() -> fx.GraphModule:
    g = fx.Graph()
    x = g.placeholder("primals_1")
    with FakeTensorMode():
        x.meta["val"] = torch.empty(4, 8)  # 128 bytes
    g.output((x,))
    return fx.GraphModule(torch.nn.Module(), g)


def test_a_graph_without_ops_plans_to_nothing():
    fw, bw = _passthrough(), _passthrough()
    problem = build_planning_problem(
        fw, fw, bw, [], value=int, rates_op_s=lambda op: roofline_s(op, CPU_DEFAULTS)
    )
    assert problem.timeline.n_positions == 1 and problem.timeline.static_bytes == 128
    assert memory_profile(problem, {}).peak == 128
    sol = solve(problem, 1 << 20, CPU_DEFAULTS)
    assert sol.feasible and sol.plan_strings == () and sol.predicted_peak == 128
