"""memopt plan on a model with an assertion-style data check in eager code between graphs
(transformers' torch_compilable_check -> torch._check_tensor_all, as Llava/Qwen2-VL/PaliGemma use
for the image-token count). Training with torch.compile / memopt.optimize runs; `memopt plan` fails.

cd docs/data/sweep5 && PYTHONPATH=.:../../.. \
  python -m memopt plan repro_cli_check:factory --batch 2 --device-kind cpu
"""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x, ids):
        h = torch.relu(self.a(x))
        n = (ids == 5).sum(dim=1)
        # a data check that must hold; under dynamo: graph break (.item() / bool of a tensor)
        torch._check_tensor_all(n == ids.shape[1] // 2)
        return torch.relu(self.b(h)).mean()


def factory(batch=2):
    ids = torch.zeros(batch, 8, dtype=torch.long)
    ids[:, :4] = 5
    return Net(), {"x": torch.randn(batch, 8, 16), "ids": ids}


if __name__ == "__main__":
    import memopt
    torch.set_num_threads(1)
    m, inp = factory()
    memopt.optimize(m)(**inp).backward()
    print("memopt.optimize training step: ok")
