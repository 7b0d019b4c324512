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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_hf  # noqa: E402


def kernels(fn) -> dict:  # noqa: ANN001
    """One call's GPU time (ms), kernel count and kernels, longest first (e2e_hf.kernel_profile)."""
    p = e2e_hf.kernel_profile(fn, top=40)
    return {"gpu_ms": p["gpu_us"] / 1e3, "kernels": p["kernels"], "top": p["top"]}


def gpt2_prefill() -> list[dict]:
    import torch

    model = e2e_hf.build_model(e2e_hf.load_config("gpt2-xl")).eval()
    out = []
    for seq in (16, 256, 1024):
        ids = torch.randint(0, model.config.vocab_size, (1, seq), device="cuda")

        @torch.no_grad()
        def fwd(ids=ids):  # noqa: ANN001, ANN202
            model(input_ids=ids, use_cache=False, logits_to_keep=1)

        walls = e2e_hf.time_iters(fwd, 10)
        host = e2e_hf.host_forward(fwd, 10)
        row = {"seq": seq, "wall_ms": statistics.median(walls), "walls_ms": walls,
               "host_ms": host["host_ms"], "hosts_ms": host["host_samples_ms"],
               **kernels(fwd)}  # fmt: skip
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
    row = {"batch": batch, "ctx": ctx, "cache_k_shape": list(cache.layers[0].keys.shape),
           **kernels(step)}  # fmt: skip
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
    row = {"seq": 2048, **kernels(fwd)}
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
