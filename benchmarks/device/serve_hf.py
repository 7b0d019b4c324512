"""Serving runs through Hugging Face continuous batching on the GPU present, for `gpuperf serve`'s
hf profile: random-weight Llamas of two sizes, several request counts, lengths and arrivals,
CUDA graphs off and (forced) on. One results file with every run's per-request timestamps.

    python3 benchmarks/device/serve_hf.py OUT.json [--families|--families2|--families3]
        [--only NAME ...]
    python3 benchmarks/device/serve_hf.py OUT.json --families   # the held-out families' runs
    python3 benchmarks/device/serve_hf.py OUT.json --families2  # two more, no preset of theirs
    python3 benchmarks/device/serve_hf.py OUT.json --families3  # two without GQA
    python3 benchmarks/device/serve_hf.py --closed   # the names of the closed-loop runs
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuperf.measure.serve_hf import run  # noqa: E402

PRESETS = Path(__file__).resolve().parents[2] / "gpuperf" / "workloads" / "presets"
CB = {"block_size": 256, "num_blocks": 512, "max_batch_tokens": 2048}


def config(name: str) -> dict:
    return json.loads((PRESETS / f"{name}.json").read_text())


def fixed(n: int, isl: int, osl: int) -> list[list[float]]:
    return [[0.0, isl, osl] for _ in range(n)]


def poisson(n: int, rate: float, isl: int, osl: int, seed: int = 1) -> list[list[float]]:
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append([round(t, 6), isl, osl])
    return out


def uniform(n: int, seed: int = 2) -> list[list[float]]:
    rng = random.Random(seed)
    return [[0.0, rng.randint(128, 1024), rng.randint(32, 256)] for _ in range(n)]


def drawn(n: int, isl: int, osl: int, ratio: float = 0.8, seed: int = 3) -> list[list[float]]:
    """n requests with lengths uniform over [ratio * L, L] (a benchmark client's
    --random-range-ratio), for a closed loop (arrival times unused)."""
    rng = random.Random(seed)
    return [[0.0, rng.randint(int(isl * ratio), isl), rng.randint(int(osl * ratio), osl)]
            for _ in range(n)]  # fmt: skip


def closed_loops() -> list[tuple[str, str, list, dict, int]]:
    """Closed loops of users (a benchmark client at --max-concurrency): lengths drawn, so the
    users drift apart after the first wave, and one of fixed lengths, which stays in step."""
    return [
        ("llama3.2-1b_c16_drawn_512x128", "llama3.2-1b", drawn(96, 512, 128), {}, 16),
        ("llama3.2-1b_c16_fixed_512x128", "llama3.2-1b", fixed(96, 512, 128), {}, 16),
        ("llama3.2-1b_c64_drawn_512x128", "llama3.2-1b", drawn(256, 512, 128), {}, 64),
        ("llama3-8b_c16_drawn_512x128", "llama3-8b", drawn(96, 512, 128), {}, 16),
        ("llama3-8b_c32_drawn_2048x64", "llama3-8b", drawn(128, 2048, 64), {}, 32),
    ]


def families() -> list[tuple[str, str, list, dict, int]]:
    """Families no fit has met (serve_hf_families.json, every run held out): Qwen2-7B (q/k/v
    biases, a 152k vocabulary, 28 heads over 4 KV heads) and Mistral-7B, all at once, Poisson,
    CUDA graphs forced on, and a closed loop."""
    out = []
    for model in ("qwen2-7b", "mistral-7b"):
        out += [
            (f"{model}_n64_512x128", model, fixed(64, 512, 128), {}, 0),
            (f"{model}_n64_2048x64", model, fixed(64, 2048, 64), {}, 0),
            (f"{model}_poisson8_n120_512x128", model, poisson(120, 8.0, 512, 128), {}, 0),
            (f"{model}_c16_drawn_512x128", model, drawn(96, 512, 128), {}, 16),
        ]
    out.insert(2, ("qwen2-7b_n64_512x128_graphs", "qwen2-7b", fixed(64, 512, 128),
                   {"use_cuda_graph": True}, 0))  # fmt: skip
    return out


def families2() -> list[tuple[str, str | dict, list, dict, int]]:
    """Two more families no serving run had met (serve_hf_families2.json, every run held out),
    their configs as e2e_hf.py builds them (no preset: the run keeps its config): Qwen3-8B
    (RMSNorm on q and k, 32 heads over 8 KV heads, a 152k vocabulary) and Phi-3-mini (32
    KV heads, head 96, and a 2,047-token sliding window on every layer, which the 2,048-token
    prompts cross); the same four workloads as families()."""
    from e2e_hf import QWEN3_8B, _hf

    out = []
    for name, cfg in (("qwen3-8b", dict(QWEN3_8B)), ("phi-3-mini", _hf("phi-3-mini-4k-instruct"))):
        out += [
            (f"{name}_n64_512x128", cfg, fixed(64, 512, 128), {}, 0),
            (f"{name}_n64_2048x64", cfg, fixed(64, 2048, 64), {}, 0),
            (f"{name}_poisson8_n120_512x128", cfg, poisson(120, 8.0, 512, 128), {}, 0),
            (f"{name}_c16_drawn_512x128", cfg, drawn(96, 512, 128), {}, 16),
        ]
    return out


def families3() -> list[tuple[str, str | dict, list, dict, int]]:
    """Two families without GQA, no serving run had met either (serve_hf_families3.json, every
    run held out): Llama-2-7B (32 KV heads of 128, a preset) and Pythia-6.9B (GPT-NeoX: 32 KV
    heads, a quarter of each head rotated, parallel attention and MLP, LayerNorm and GELU, 2,048
    positions, so its prompts stay at 512 tokens), their K and V handed to SDPA without a
    repeat_kv copy."""
    from e2e_hf import load_config

    pythia = load_config("pythia-6.9b")
    cb = {"num_blocks": 160}  # 40,960 tokens (20 GiB without GQA): 64 requests of 640 fit
    return [
        ("llama2-7b_n64_512x128", "llama2-7b", fixed(64, 512, 128), cb, 0),
        ("llama2-7b_n64_2048x64", "llama2-7b", fixed(64, 2048, 64), cb, 0),
        ("llama2-7b_poisson8_n120_512x128", "llama2-7b", poisson(120, 8.0, 512, 128), cb, 0),
        ("pythia-6.9b_n64_512x128", pythia, fixed(64, 512, 128), cb, 0),
        ("pythia-6.9b_poisson8_n120_512x128", pythia, poisson(120, 8.0, 512, 128), cb, 0),
    ]


def runs() -> list[tuple[str, str, list, dict, int]]:
    out = []
    for model, rate in (("llama3.2-1b", 24.0), ("llama3-8b", 8.0)):
        out += [
            (f"{model}_n16_512x128", model, fixed(16, 512, 128), {}),
            (f"{model}_n64_512x128", model, fixed(64, 512, 128), {}),
            (f"{model}_n64_2048x64", model, fixed(64, 2048, 64), {}),
            (f"{model}_n256_256x256", model, fixed(256, 256, 256), {}),
            (f"{model}_n64_uniform", model, uniform(64), {}),
            (f"{model}_poisson{rate:g}_n120_512x128", model, poisson(120, rate, 512, 128), {}),
            (f"{model}_n64_512x128_graphs", model, fixed(64, 512, 128), {"use_cuda_graph": True}),
        ]
    return [(*r, 0) for r in out] + closed_loops()


def main() -> None:
    if sys.argv[1:] == ["--closed"]:  # the names of the closed-loop runs
        print(" ".join(r[0] for r in closed_loops()))
        return
    path, args = Path(sys.argv[1]), sys.argv[2:]
    pick = {"--families": families, "--families2": families2, "--families3": families3}
    chosen = pick[args.pop(0)]() if args and args[0] in pick else runs()
    only = set(args[1:]) if args[:1] == ["--only"] else None
    from gpuperf.measure.calibration import measure_attn_plan

    # The host's cuDNN plan of a new SDPA shape (the hf engine's step_plans are in its units).
    results = {"kind": "serve_hf", "runs": [], "attn_plan_ms": measure_attn_plan() * 1e3}
    for name, model, reqs, cb, users in chosen:
        if only and name not in only:
            continue
        preset = model if isinstance(model, str) else None  # else the config itself
        spec = {"config": config(model) if preset else model, "requests": reqs,
                "cb": {**CB, **cb}, "dtype": "bf16", "seed": 0, "label": name, "preset": preset,
                "concurrency": users}  # fmt: skip
        start = time.perf_counter()
        try:
            out = run(spec)
            out["preset"] = preset
            err = None
        except Exception as exc:  # noqa: BLE001 (a run that fails is recorded, the rest go on)
            out = {"label": name, "preset": preset, "cb": spec["cb"], "requests": []}
            err = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        out["error"] = err
        out["wall_s"] = time.perf_counter() - start
        results["runs"].append(out)
        if "env" in out:
            results["env"] = out["env"]
        path.write_text(json.dumps(results))
        reqs_out = out.get("requests", [])
        last = max((r["last_s"] or 0 for r in reqs_out), default=0)
        print(f"{name}: {len(reqs_out)} requests in {last:.2f} s (wall {out['wall_s']:.1f} s) "
              f"attn={out.get('attn_implementation')} error={err}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
