"""Training steps as PyTorch-native trainers run them (torchtitan's recipe), on one GPU.

torchtitan trains Llamas with per-block `torch.compile`, activation checkpointing either of
whole blocks ("full") or per operator ("selective op": every matmul's output kept except every
second one, SDPA's kept, everything else recomputed), and torchao's float8 linears. None of
it had a measured run here: gpuperf's training runs were eager Hugging Face steps. This times
the same Hugging Face Llama (Llama-3.1-8B's width, few layers, random bf16 weights, foreach
AdamW with bf16 states) under each:

- eager | compile (each decoder layer compiled, as torchtitan compiles each block);
- no checkpointing | op (torchtitan's per-op policy) | full (each layer again in backward);
- bf16 | float8 tensorwise | float8 rowwise (torchao's convert_to_float8_training, the
  output head left in bf16, as torchtitan does), where torchao imports.

Each variant: warm-up steps (compilation), then timed steps (CUDA events) over several seconds
of sustained load, peak memory, and one profiled step's kernels (name, count, total time).

    python3 benchmarks/device/compile_train_probe.py OUT_DIR [--model llama3.1-8b,qwen3-8b,...]
        [--layers 8] [--batch 1] [--seq 8192] [--steps 12] [--only NAME,...]

Writes OUT_DIR/e2e_compile_train.json, which benchmarks/accuracy.py reads as it reads
e2e_hf.py's: env (GPU, driver, CUDA, torch, transformers, torchao), and per variant the
scenario (impl compile or eager, recompute, dtype), samples_ms, measured_ms (median), peak
memory and the profile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import e2e_hf  # noqa: E402 (the device scripts' shared helpers)

sys.path.insert(0, str(HERE.parents[1]))
from gpuperf.measure.layer_wrap import wrap_layers  # noqa: E402

# meta-llama/Llama-3.1-8B config.json, without rope_scaling; the layer count is the probe's.
LLAMA31_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
}  # fmt: skip

# For runs the model was not written on: Qwen3-8B (q/k norms) and Llama-3.2-3B (tied
# embeddings), as e2e_hf.py builds them.
MODELS = {"llama3.1-8b": LLAMA31_8B, "qwen3-8b": e2e_hf.load_config("qwen3-8b"),
          "llama3.2-3b": e2e_hf.LLAMA_3B}  # fmt: skip

VARIANTS = [  # (name, compile, recompute, float8)
    ("eager", False, "none", ""),
    ("eager_op", False, "op", ""),
    ("eager_full", False, "full", ""),
    ("compile", True, "none", ""),
    ("compile_op", True, "op", ""),
    ("compile_full", True, "full", ""),
    ("compile_op_fp8_tensor", True, "op", "tensorwise"),
    ("compile_op_fp8_row", True, "op", "rowwise"),
    ("eager_op_fp8_tensor", False, "op", "tensorwise"),
]


def to_float8(model, recipe: str) -> None:  # noqa: ANN001
    """torchao's float8 training linears on every decoder Linear (torchtitan leaves the output
    head in bf16)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    cfg = (Float8LinearConfig() if recipe == "tensorwise"
           else Float8LinearConfig.from_recipe_name(recipe))  # fmt: skip
    convert_to_float8_training(model.model.layers, config=cfg)


def run(variant: tuple, model_name: str, layers: int, batch: int, seq: int, steps: int) -> dict:
    import torch

    name, compiled, recompute, fp8 = variant
    base = MODELS[model_name]
    cfg = dict(base, num_hidden_layers=layers or base["num_hidden_layers"])
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = e2e_hf.build_model(cfg)
    model.train()
    if fp8:
        to_float8(model, fp8)
    wrap_layers(model, recompute, compiled)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)  # foreach, states in the params' bf16
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq), device="cuda")

    def step() -> None:
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    for _ in range(3):  # compilation, autotuning of nothing (default mode), allocator warm-up
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    samples = e2e_hf.time_iters(step, steps, warmup=0)
    peak = torch.cuda.max_memory_allocated()
    profile = e2e_hf.kernel_profile(step, top=80)
    scenario = {"mode": "train", "impl": "compile" if compiled else "eager",
                "cuda_graphs": False, "batch": batch, "seq": seq, "ctx": None,
                "dtype": "fp8" if fp8 else "bf16"}  # fmt: skip
    if recompute != "none":
        scenario["recompute"] = recompute
    if fp8 == "rowwise":
        scenario["fp8_scales"] = "row"
    return {
        "name": name, "model": f"{model_name}-{cfg['num_hidden_layers']}l", "config": cfg,
        "scenario": scenario,
        "compile": compiled, "recompute": recompute, "float8": fp8 or None,
        "note": ("HF LlamaForCausalLM, sdpa; per-layer torch.compile (default mode) where "
                 "compile; checkpoint per layer (use_reentrant=False; op: torchtitan's per-op "
                 "policy); bf16 params, foreach AdamW with bf16 states, HF loss (fp32 logits)"),
        "warmup_s": warm_s, "samples_ms": samples, "measured_ms": statistics.median(samples),
        "first3_ms": statistics.median(samples[:3]), "last3_ms": statistics.median(samples[-3:]),
        "peak_bytes": peak, "peak_mem_gib": peak / 2**30, "profile": profile,
        **({"excluded": "eager torchao float8 (no torch.compile): its scaling runs as thousands "
                        "of unfused kernels a step; gpuperf refuses eager fp8 training rather "
                        "than model it"} if fp8 and not compiled else {}),
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="llama3.1-8b",
                    help=f"comma-separated, of: {', '.join(MODELS)}")  # fmt: skip
    ap.add_argument("--layers", type=int, default=8, help="0: the model's own")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--only", default="", help="comma-separated variant names")
    args = ap.parse_args()
    import torch

    env = e2e_hf.env_stamp()
    try:
        import torchao

        env["torchao"] = torchao.__version__
    except Exception as exc:  # noqa: BLE001
        env["torchao"] = f"unavailable: {exc}"[:200]
    only = set(filter(None, args.only.split(",")))
    result = {"env": env, "runs": []}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "e2e_compile_train.json"
    todo = [
        (m, v)
        for m in args.model.split(",")
        for v in VARIANTS
        if (not only or v[0] in only) and (not v[3] or str(env["torchao"])[:1].isdigit())
    ]
    for model_name, v in todo:
        t0 = time.perf_counter()
        try:
            row = run(v, model_name, args.layers, args.batch, args.seq, args.steps)
            print(f"{model_name:12s} {v[0]:22s} {row['measured_ms']:9.1f} ms  "
                  f"first3 {row['first3_ms']:8.1f} last3 {row['last3_ms']:8.1f}  "
                  f"peak {row['peak_mem_gib']:5.1f} GiB  "
                  f"kernels {row['profile']['kernels']}  warm {row['warmup_s']:.0f} s",
                  flush=True)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 (record and go on)
            row = {"name": v[0], "model": model_name,
                   "error": f"{type(exc).__name__}: {exc}"[:2000],
                   "trace": traceback.format_exc()[-3000:]}  # fmt: skip
            print(v[0], "FAILED", row["error"][:300], flush=True)
        row["wall_s"] = time.perf_counter() - t0
        result["runs"].append(row)
        torch.cuda.empty_cache()
        path.write_text(json.dumps(result, indent=1))  # after every variant: nothing lost
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
