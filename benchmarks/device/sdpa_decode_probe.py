"""Why eager decode's attention costs the host what it does, model by model: eager decode steps
on a growing DynamicCache over kv lengths the process has not met (cuDNN's SDPA plans each new
shape), the same lengths again (plans cached) and with cuDNN's SDPA off; the first steps' SDPA
calls with their arguments (shapes, strides, GQA, mask), the backend PyTorch picks and their host
time; SDPA alone on decode shapes at new and seen kv lengths (MHA, GQA by enable_gqa, GQA by
repeated kv); this host's launch costs and plan time (e2e_hf.launch_costs). Each model gets its
own kv lengths, so none meets plans another one made. Writes sdpa_decode_probe.json.

    python3 benchmarks/device/sdpa_decode_probe.py OUT_DIR [--models a,b,...|families]

Each model's short forward (16 tokens, no cache) gives its host time per forward and kernel count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_hf  # noqa: E402

MODELS = {
    "llama2-7b-4l": lambda: {**e2e_hf.load_config("llama2-7b"), "num_hidden_layers": 4},
    "llama3-8b-4l": lambda: {**e2e_hf.load_config("llama3-8b"), "num_hidden_layers": 4},
    "llama3-8b-8l": lambda: {**e2e_hf.load_config("llama3-8b"), "num_hidden_layers": 8},
    "mixtral-4l": lambda: e2e_hf.load_config("mixtral-4l"),
    "qwen3-moe-8l": lambda: e2e_hf.load_config("qwen3-moe-8l"),
    "qwen1.5-moe-8l": lambda: e2e_hf.load_config("qwen1.5-moe-8l"),
    "deepseek-v3-3l": lambda: e2e_hf.load_config("deepseek-v3-3l"),
}
# The dense families of e2e_hf.py's families plan, whole (--models families).
FAMILIES = ("llama3-8b", "qwen2-7b", "qwen3-8b", "gemma2-9b", "gemma-3-1b", "phi-3-mini",
            "falcon-7b", "minitron-8b", "starcoder", "gpt2-xl", "pythia-6.9b")  # fmt: skip
DEFAULT_MODELS = tuple(MODELS)
MODELS |= {name: (lambda n=name: e2e_hf.load_config(n)) for name in FAMILIES}
BACKENDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}


def _desc(t):  # noqa: ANN001, ANN202
    return None if t is None else {"shape": list(t.shape), "stride": list(t.stride()),
                                   "dtype": str(t.dtype), "ptr_mod_256": t.data_ptr() % 256,
                                   "contiguous": t.is_contiguous()}  # fmt: skip


def _choice(q, k, v, mask, causal, gqa):  # noqa: ANN001, ANN202
    import torch

    try:
        return torch._fused_sdp_choice(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=causal,
                                       enable_gqa=gqa)  # fmt: skip
    except TypeError:  # a torch without enable_gqa
        return torch._fused_sdp_choice(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=causal)


def _steps(step, n: int) -> list[float]:  # noqa: ANN001
    import torch

    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def probe_model(name: str, ctx: int) -> dict:
    """Eager decode steps of `name` (batch 1) from `ctx` cached tokens: first on lengths the
    process has not met (cuDNN plans each), then again from a fresh cache over the same lengths
    (plans cached), then with cuDNN's SDPA off. The first steps' SDPA calls are recorded."""
    import torch
    import torch.nn.functional as F

    cfg = MODELS[name]()
    model = e2e_hf.build_model(cfg)
    model.eval()
    row: dict = {"model": name, "config": cfg, "ctx": ctx}
    calls: list[dict] = []
    orig = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,  # noqa: ANN001, ANN202
            enable_gqa=False):  # fmt: skip
        try:
            choice = _choice(q, k, v, attn_mask, is_causal, enable_gqa)
        except Exception as exc:  # noqa: BLE001
            choice = repr(exc)[:80]
        t0 = time.perf_counter()
        out = orig(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                   scale=scale, enable_gqa=enable_gqa)  # fmt: skip
        host = (time.perf_counter() - t0) * 1e3
        calls.append({"host_ms": host, "backend": BACKENDS.get(choice, choice),
                      "q": _desc(q), "k": _desc(k), "v": _desc(v), "mask": _desc(attn_mask),
                      "is_causal": bool(is_causal), "enable_gqa": bool(enable_gqa)})  # fmt: skip
        return out

    with torch.no_grad():
        row["short_forward"] = short_forward(model)
        step, _ = e2e_hf.decode_step(model, 1, ctx)
        F.scaled_dot_product_attention = spy
        try:
            row["spied_step_ms"] = _steps(step, 2)
        finally:
            F.scaled_dot_product_attention = orig
        row["new_lengths_step_ms"] = _steps(step, 10)
        step, _ = e2e_hf.decode_step(model, 1, ctx)  # the same lengths again: plans cached
        _steps(step, 2)
        row["seen_lengths_step_ms"] = _steps(step, 10)
        torch.backends.cuda.enable_cudnn_sdp(False)
        try:
            step, _ = e2e_hf.decode_step(model, 1, ctx + 50)
            _steps(step, 2)
            row["no_cudnn_step_ms"] = _steps(step, 10)
        finally:
            torch.backends.cuda.enable_cudnn_sdp(True)
    row["sdpa_calls"] = calls
    del model, step
    torch.cuda.empty_cache()
    med = statistics.median
    print(f"{name}: new lengths {med(row['new_lengths_step_ms']):.1f} ms, seen lengths "
          f"{med(row['seen_lengths_step_ms']):.1f} ms, no cuDNN "
          f"{med(row['no_cudnn_step_ms']):.1f} ms; first steps' SDPA host ms "
          f"{[round(c['host_ms'], 2) for c in calls]}; backends "
          f"{sorted({c['backend'] for c in calls})}", flush=True)  # fmt: skip
    return row


def short_forward(model, seq: int = 16, n: int = 10) -> dict:  # noqa: ANN001
    """The host's time for one forward of `seq` tokens without a cache (the GPU's share is tiny,
    so the call returns when the host has issued every kernel), and its kernel count."""
    import torch

    ids = torch.randint(0, model.config.vocab_size, (1, seq), device="cuda")
    return {"seq": seq, **e2e_hf.host_forward(
        lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1), n)}  # fmt: skip


def sdpa_alone() -> list[dict]:
    """SDPA on decode shapes (b1, 32 query heads, q 1, d 128) at kv lengths it has not met, then
    again at the same lengths: MHA, GQA by enable_gqa (8 kv heads), GQA by repeated kv."""
    import torch
    import torch.nn.functional as F

    rows = []
    dt = torch.bfloat16
    for i, kind in enumerate(("mha", "gqa_enable", "gqa_repeat", "gqa_enable_strided")):
        for seen in (False, True):
            for kv in range(5001 + 20 * i, 5001 + 20 * i + 6):
                q = torch.randn(1, 32, 1, 128, device="cuda", dtype=dt)
                hk = 32 if kind == "mha" else 8
                if kind == "gqa_enable_strided":  # a view of a longer buffer (StaticCache-like)
                    buf = torch.randn(1, hk, kv + 64, 128, device="cuda", dtype=dt)
                    k, v = buf[:, :, :kv], buf[:, :, :kv]
                else:
                    k, v = (torch.randn(1, hk, kv, 128, device="cuda", dtype=dt) for _ in range(2))
                kw = {}
                if kind.startswith("gqa_enable"):
                    kw["enable_gqa"] = True
                if kind == "gqa_repeat":
                    k, v = (x.repeat_interleave(4, dim=1) for x in (k, v))
                choice = _choice(q, k, v, None, False, kw.get("enable_gqa", False))
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                F.scaled_dot_product_attention(q, k, v, **kw)
                host = (time.perf_counter() - t0) * 1e3
                torch.cuda.synchronize()
                rows.append({"kind": kind, "kv_len": kv, "seen_before": seen, "host_ms": host,
                             "backend": BACKENDS.get(choice, choice)})  # fmt: skip
    for kind in ("mha", "gqa_enable", "gqa_repeat", "gqa_enable_strided"):
        new = [r["host_ms"] for r in rows if r["kind"] == kind and not r["seen_before"]][1:]
        seen = [r["host_ms"] for r in rows if r["kind"] == kind and r["seen_before"]]
        be = {r["backend"] for r in rows if r["kind"] == kind}
        print(f"sdpa alone {kind}: new {statistics.median(new):.2f} ms, seen "
              f"{statistics.median(seen):.3f} ms, backend {be}", flush=True)  # fmt: skip
    return rows


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="names, or 'families'")
    ap.add_argument("--out-name", default="sdpa_decode_probe.json")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"env": e2e_hf.env_stamp(), "kind": "sdpa_decode_probe"}
    result |= {"launch": e2e_hf.launch_costs(), "sdpa_alone": sdpa_alone(), "models": []}
    print("launch costs:", json.dumps(result["launch"]), flush=True)
    names = FAMILIES if args.models == "families" else args.models.split(",")
    for i, name in enumerate(names):
        try:  # each model its own kv lengths: no model meets plans another one made
            ctx = 600 + 10 * i if name == "gpt2-xl" else 1024 + 100 * i  # GPT-2: 1,024 positions
            result["models"].append(probe_model(name, ctx))
        except Exception as exc:  # noqa: BLE001 (one model failing leaves the others)
            print(f"{name}: failed {exc!r}", flush=True)
            result["models"].append({"model": name, "error": repr(exc)})
            torch.cuda.empty_cache()
        (out / args.out_name).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
