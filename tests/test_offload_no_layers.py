"""``offload_layers`` on a one-region model whose layers memopt cannot find (blocks held as plain
attributes, no ModuleList, no numbered path): the note that nothing is offloaded comes in the
first step, as its backward begins, not only when a second step starts; once."""

from __future__ import annotations

import logging

import torch
import torch.nn as nn

import memopt

D = 32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second, self.third = Block(), Block(), Block()

    def forward(self, x):
        return self.third(self.second(self.first(x))).pow(2).mean()


def _notes(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "nothing is offloaded" in r.getMessage()]


def test_no_layers_to_offload_is_said_in_the_first_step(caplog):
    torch.manual_seed(0)
    model, x = Net(), torch.randn(16, D)
    opt = memopt.optimize(model, offload_layers=1)
    caplog.set_level(logging.WARNING, logger="memopt")
    loss = opt(x)
    assert _notes(caplog) == []  # the forward alone cannot tell
    loss.backward()
    said = _notes(caplog)
    assert len(said) == 1 and said[0].startswith("memopt: offload_layers=1: no repeated layers")
    for _ in range(2):
        opt(x).backward()
    assert _notes(caplog) == said  # not again at the step's end
    rep = memopt.report(opt)
    assert rep.offloaded_bytes() == 0
    assert sum("no repeated layers" in n for n in rep.step.notes) == 1
