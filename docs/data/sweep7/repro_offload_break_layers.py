"""memopt.optimize(offload_layers=1, offload_min_bytes=0) offloads nothing, and says nothing,
when each layer ends in a graph break (DETR's encoder layers in training:
`if not torch.isfinite(h).all(): h = clamp(h)`, modeling_detr.py:643): every compiled region
holds one layer, no region sees "repeated modules", and the setting is dropped without a
warning (DETR: 5 regions, 0 bytes offloaded; the only warning is about the backbone's stages).

    python repro_offload_break_layers.py      (from docs/data/sweep7, venv on)
"""
import sys, warnings, logging, os

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "../../..")))
import torch
import torch.nn as nn

import memopt

torch.set_num_threads(1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 32)
        self.norm = nn.LayerNorm(32)

    def forward(self, h):
        h = self.norm(h + self.fc2(self.fc1(h).relu()))
        if not torch.isfinite(h).all():  # DETR's training-time check: a graph break
            h = h.clamp(-1e4, 1e4)
        return h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x.square().mean()


class Catch(logging.Handler):
    def __init__(self):
        super().__init__()
        self.msgs = []

    def emit(self, record):
        self.msgs.append(record.getMessage())


if __name__ == "__main__":
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 64, 32)
    h = Catch()
    logging.getLogger("memopt").addHandler(h)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
        for _ in range(2):
            model.zero_grad()
            opt(x).backward()
    rep = memopt.report(opt)
    offs = [r.extra.get("offload") for r in rep.regions]
    total = sum(o.get("total_bytes", 0) for o in offs if isinstance(o, dict))
    said = [m for m in h.msgs + [str(x.message) for x in w] if "offload" in m.lower()]
    print("regions:", len(rep.regions), "offload per region:", offs)
    print("offload warnings:", said)
    assert total > 0 or said, (
        "BUG: offload_layers=1 offloaded 0 bytes over %d regions and no warning said why"
        % len(rep.regions))
    print("offloaded bytes:", total)
