"""memopt counts an MLP head's `layers` ModuleList as model layers: DETR's
`bbox_predictor.layers` (3 Linear of DetrMLPPredictionHead) joins `model.encoder.layers` (2)
and `model.decoder.layers` (2), so offload_layers / sync number 7 "layers"
("model.encoder.layers.0 .. bbox_predictor.layers.2 (7)" in DETR's offload warning) and
offload_layers=4..6 is accepted for a model with 4 transformer layers.
(memopt/api.py `_check_layers`: every outer container whose last name equals the name of the
container with most children; the 3-Linear head has the most.)

    python repro_layers_mlp_head.py      (from docs/data/sweep7, venv on)
"""
import os, sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "../../..")))
import torch.nn as nn

import memopt
from memopt.errors import ConfigError


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        return x + self.fc(x).relu()


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(2))


class MLPHead(nn.Module):  # DETR's DetrMLPPredictionHead: self.layers = ModuleList(Linear...)
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.decoder, self.bbox_predictor = Stack(), Stack(), MLPHead()


if __name__ == "__main__":
    model = Net()
    try:
        memopt.optimize(model, offload_layers=5)  # 4 transformer layers: should be refused
    except ConfigError as e:
        print("refused (fixed):", e)
    else:
        raise AssertionError("BUG: offload_layers=5 accepted: the MLP head's 3 Linear count as "
                             "model layers (2 + 2 + 3 = 7)")
