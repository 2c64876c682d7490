"""Why HostAdamW(device_overlap=True) holds more bytes after backward than fused AdamW."""
import collections, json, os, sys
import torch, torch.distributed as dist
sys.path.insert(0, os.getcwd())
from tests import test_params_fsdp_cuda as T

os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1)
torch.cuda.set_device(0)
out = {}

def frames(b):
    fr = b.get("frames") or []
    keep = [f"{os.path.basename(f['filename'])}:{f['line']}:{f['name']}" for f in fr
            if ("memopt" in f["filename"] or "fsdp" in f["filename"] or "test_params" in f["filename"]
                or "torch/optim" in f["filename"] or "autograd" in f["filename"])]
    return " < ".join(keep[:5]) or (fr and f"{fr[0]['filename']}:{fr[0]['name']}") or "?"

def run(label, opt_of, poke=False):
    from torch.distributed.fsdp import fully_shard
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    model = T._model().cuda()
    for layer in model.layers: fully_shard(layer)
    fully_shard(model)
    opt = opt_of(model)
    rec = {}
    for s in range(T.STEPS):
        g = torch.Generator().manual_seed(s)
        ids = torch.randint(0, T.VOCAB, (8, 128), generator=g).cuda()
        if s == T.STEPS - 1:
            torch.cuda.memory._record_memory_history(max_entries=200000)
        loss = model(ids); loss.backward(); torch.cuda.synchronize()
        rec["after"] = torch.cuda.memory_allocated() - base
        if poke:
            x = torch.empty(1, device="cuda"); del x
            rec["after_poke"] = torch.cuda.memory_allocated() - base
        rec["grads"] = sum(p.grad.to_local().nbytes for p in model.parameters() if p.grad is not None)
        rec["params"] = sum(p.to_local().nbytes for p in model.parameters())
        st = opt.state
        rec["state_dev"] = sum(v.to_local().nbytes if hasattr(v, "to_local") else v.nbytes
                               for s_ in st.values() for v in s_.values() if torch.is_tensor(v) and v.is_cuda)
        if s == T.STEPS - 1:
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            by = collections.Counter()
            for seg in snap["segments"]:
                for b in seg["blocks"]:
                    if b["state"] == "active_allocated":
                        by[frames(b)] += b["size"]
            rec["active_by_frame"] = by.most_common(25)
            rec["active_total"] = sum(by.values())
        opt.step(); opt.zero_grad()
    getattr(opt, "close", lambda: None)()
    out[label] = rec
    print(label, {k: v for k, v in rec.items() if k != "active_by_frame"}, flush=True)
    for f, n in rec.get("active_by_frame", []):
        print(f"   {n:>12,}  {f}")
    del model, opt

from memopt.params import HostAdamW
run("fused", lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True))
run("overlap", lambda m: HostAdamW(m.parameters(), lr=1e-3, overlap=True, device_overlap=True, model=m), poke=True)
run("hostadamw_no_overlap", lambda m: HostAdamW(m.parameters(), lr=1e-3, overlap=True, model=m), poke=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "diag_overlap.json"), "w"), indent=1, default=str)
dist.destroy_process_group()
