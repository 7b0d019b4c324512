"""Where three families' Hugging Face steps spend their time, beyond what e2e_families.json shows:

- GPT-2 XL prefill: the wall time (CUDA events), the host's time to issue the forward (no sync at
  its end) and the GPU's kernels, at 16, 256 and 1024 tokens: is the host's share growing with
  the sequence?
- GPT-BigCode (StaticCache decode, what the CUDA graph replays): the cache's K/V shape and one
  eager step's kernels (a graph replays the same kernels).
- Falcon-7B prefill: its attention's kernels one by one (PyTorch's math SDPA in fp32).

    python3 benchmarks/device/family_diag_probe.py OUT_DIR

Writes family_diag_probe.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_hf  # noqa: E402


def kernels(fn) -> list[dict]:  # noqa: ANN001
    """fn's GPU kernels (name, count, total us), longest first."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
            rows.append({"name": e.key[:160], "count": e.count, "total_us": total})
    rows.sort(key=lambda r: -r["total_us"])
    return rows


def gpt2_prefill() -> list[dict]:
    import torch

    model = e2e_hf.build_model(e2e_hf.load_config("gpt2-xl")).eval()
    out = []
    for seq in (16, 256, 1024):
        ids = torch.randint(0, model.config.vocab_size, (1, seq), device="cuda")

        @torch.no_grad()
        def fwd(ids=ids):  # noqa: ANN001, ANN202
            model(input_ids=ids, use_cache=False, logits_to_keep=1)

        for _ in range(3):
            fwd()
        hosts, walls = [], e2e_hf.time_iters(fwd, 10)
        for _ in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fwd()
            hosts.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        ks = kernels(fwd)
        row = {"seq": seq, "wall_ms": statistics.median(walls), "walls_ms": walls,
               "host_ms": statistics.median(hosts), "hosts_ms": hosts,
               "gpu_ms": sum(k["total_us"] for k in ks) / 1e3,
               "kernels": sum(k["count"] for k in ks), "top": ks[:25]}  # fmt: skip
        print(f"gpt2-xl s={seq}: wall {row['wall_ms']:.1f} ms, host {row['host_ms']:.1f} ms, "
              f"gpu {row['gpu_ms']:.1f} ms, {row['kernels']} kernels", flush=True)  # fmt: skip
        out.append(row)
    return out


def bigcode_static() -> dict:
    import torch
    from transformers import StaticCache

    model = e2e_hf.build_model(e2e_hf.load_config("starcoder")).eval()
    batch, ctx = 8, 2048
    cache = StaticCache(config=model.config, max_cache_len=ctx + 32)
    vocab = model.config.vocab_size
    with torch.no_grad():
        ids = torch.randint(0, vocab, (batch, ctx), device="cuda")
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = torch.randint(0, vocab, (batch, 1), device="cuda")
    pos = torch.tensor([ctx], device="cuda")

    @torch.no_grad()
    def step():  # noqa: ANN202
        model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)

    for _ in range(3):
        step()
    layer = cache.layers[0]
    ks = kernels(step)
    row = {"batch": batch, "ctx": ctx, "cache_k_shape": list(layer.keys.shape),
           "gpu_ms": sum(k["total_us"] for k in ks) / 1e3,
           "kernels": sum(k["count"] for k in ks), "top": ks[:30]}  # fmt: skip
    print(f"starcoder static decode: cache K {row['cache_k_shape']}, gpu {row['gpu_ms']:.1f} ms, "
          f"{row['kernels']} kernels", flush=True)  # fmt: skip
    return row


def falcon_prefill() -> dict:
    import torch

    model = e2e_hf.build_model(e2e_hf.load_config("falcon-7b")).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, 2048), device="cuda")

    @torch.no_grad()
    def fwd():  # noqa: ANN202
        model(input_ids=ids, use_cache=False, logits_to_keep=1)

    fwd()
    ks = kernels(fwd)
    row = {"seq": 2048, "gpu_ms": sum(k["total_us"] for k in ks) / 1e3,
           "kernels": sum(k["count"] for k in ks), "top": ks[:40]}  # fmt: skip
    print(f"falcon-7b prefill: gpu {row['gpu_ms']:.1f} ms, {row['kernels']} kernels", flush=True)
    return row


def main() -> int:
    import torch

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"env": e2e_hf.env_stamp(), "kind": "family_diag_probe",
                    "launch": e2e_hf.launch_costs()}  # fmt: skip
    for key, fn in (("gpt2_prefill", gpt2_prefill), ("bigcode_static", bigcode_static),
                    ("falcon_prefill", falcon_prefill)):  # fmt: skip
        try:
            result[key] = fn()  # its model is freed on return
            torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001 (one failing leaves the others)
            result[key] = {"error": repr(exc)}
            print(f"{key}: failed {exc!r}", flush=True)
        (out / "family_diag_probe.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
