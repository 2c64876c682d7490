"""Mamba2 on CUDA: which memopt setting moves the loss off torch.compile's bits, and by how much
(bf16 and fp32). Prints one line per variant: loss, |dloss|, max relative gradient error."""
import json, os, sys
import torch
sys.path.insert(0, os.getcwd())
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import transformers, memopt
from tests.offload_partitioner import LayerOffloadPartitioner
from tests.test_offload_gpu import _hf_step

res = {}
for dtype in (torch.bfloat16, torch.float32):
    torch.manual_seed(0)
    cfg = transformers.Mamba2Config(vocab_size=512, hidden_size=256, num_hidden_layers=4, state_size=32,
        expand=2, head_dim=32, num_heads=16, n_groups=1, chunk_size=64, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = transformers.Mamba2ForCausalLM(cfg).to("cuda", dtype).train()
    ids = torch.randint(1, 512, (4, 256), device="cuda")
    variants = {
        "eager": lambda: model,
        "compile": lambda: torch.compile(model),
        "compile_again": lambda: torch.compile(model),
        "memopt_level0": lambda: memopt.optimize(model, level=0),
        "memopt_level0_off2": lambda: memopt.optimize(model, level=0, offload_layers=2, offload_min_bytes=0),
        "partitioner_off2": lambda: torch.compile(model, options={"custom_partitioner_fn": LayerOffloadPartitioner(offload_layers=2, min_bytes=0)}),
    }
    ref = None
    for name, make in variants.items():
        torch._dynamo.reset()
        try:
            loss, g = _hf_step(model, ids, make())
        except Exception as e:
            print(dtype, name, "ERROR", repr(e)[:300], flush=True); continue
        if ref is None and name == "compile":
            ref = (loss, g)
        row = {"loss": float(loss)}
        if ref is not None:
            row["dloss"] = float((loss - ref[0]).abs())
            row["bitwise"] = bool(torch.equal(loss, ref[0]) and all(torch.equal(a, b) for a, b in zip(g, ref[1])))
            row["max_rel_grad"] = max(float((a.float() - b.float()).norm() / (b.float().norm() + 1e-30)) for a, b in zip(g, ref[1]))
        if name == "eager":
            eager = (loss, g)
        else:
            row["vs_eager_rel_grad"] = max(float((a.float() - b.float()).norm() / (b.float().norm() + 1e-30)) for a, b in zip(g, eager[1]))
        res[f"{dtype}/{name}"] = row
        print(dtype, name, row, flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "diag_mamba.json"), "w"), indent=1)
