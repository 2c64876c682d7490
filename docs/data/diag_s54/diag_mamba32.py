"""Mamba2 fp32 on CUDA: torch.compile twice (its own spread) and memopt offload_layers=2."""
import json, os, sys
import torch
sys.path.insert(0, os.getcwd())
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import transformers, memopt
from tests.test_offload_gpu import _hf_step
torch.manual_seed(0)
cfg = transformers.Mamba2Config(vocab_size=512, hidden_size=256, num_hidden_layers=4, state_size=32,
    expand=2, head_dim=32, num_heads=16, n_groups=1, chunk_size=64, bos_token_id=0, eos_token_id=0, pad_token_id=0)
model = transformers.Mamba2ForCausalLM(cfg).to("cuda", torch.float32).train()
ids = torch.randint(1, 512, (4, 256), device="cuda")
res, ref = {}, None
for name, make in {"compile": lambda: torch.compile(model), "compile_again": lambda: torch.compile(model),
                   "off2": lambda: memopt.optimize(model, level=0, offload_layers=2, offload_min_bytes=0),
                   "off2_again": lambda: memopt.optimize(model, level=0, offload_layers=2, offload_min_bytes=0)}.items():
    torch._dynamo.reset()
    loss, g = _hf_step(model, ids, make())
    if ref is None: ref = (loss, g)
    rel = [float((a - b).norm() / (b.norm() + 1e-30)) for a, b in zip(g, ref[1])]
    ab = [float((a - b).abs().max()) for a, b in zip(g, ref[1])]
    res[name] = dict(loss=float(loss), dloss=float((loss - ref[0]).abs()), max_rel=max(rel), max_abs=max(ab),
                     n_not_equal=sum(not torch.equal(a, b) for a, b in zip(g, ref[1])), n=len(g))
    print(name, res[name], flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "diag_mamba32.json"), "w"), indent=1)
