"""End-to-end reference runs on a GPU: Hugging Face transformers Llamas with random bf16 weights.

Run on the device machine from the repository root:

    python3 benchmarks/device/e2e_hf.py --out "$OUT" [--quick]

Writes e2e_hf.json: for each run the model config (HF config.json form), the scenario, the measured
time per forward (median of per-iteration CUDA-event samples, all samples kept) and the environment.
benchmarks/accuracy.py predicts the same scenarios with the current model and compares.

Runs: prefill (eager, SDPA/flash), decode with a DynamicCache (eager: every step concatenates the
whole KV cache), decode with a StaticCache captured in a CUDA graph, and a training step (forward,
backward, fused AdamW) of a ~1.1B Llama. A run that fails records its error and the others go on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "gpuperf" / "workloads" / "presets"

# A ~1.1B Llama (TinyLlama-like shapes) for the training step.
TRAIN_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}


def env_stamp() -> dict:
    import torch

    env = {
        "gpu": torch.cuda.get_device_name(0),
        "gpu_count": torch.cuda.device_count(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with contextlib.suppress(Exception):  # informative only
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        env["driver"] = pynvml.nvmlSystemGetDriverVersion()
        env["sm_clock_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
        env["mem_clock_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
        env["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000
    except Exception:  # noqa: BLE001
        pass
    return env


def load_config(name: str) -> dict:
    if name == "llama-1.1b":
        return dict(TRAIN_1B)
    return json.loads((PRESETS / f"{name}.json").read_text())


def build_model(cfg_dict: dict):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = {k: v for k, v in cfg_dict.items() if not k.startswith("_")}
    cfg = AutoConfig.for_model(**d)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    return model.to(torch.bfloat16)


def time_iters(fn, iters: int, warmup: int = 3) -> list[float]:
    """Per-iteration CUDA-event times in ms, after `warmup` untimed calls."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def run_prefill(model, batch: int, seq: int, iters: int) -> list[float]:
    import torch

    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device="cuda")

    @torch.no_grad()
    def step():
        model(input_ids=ids, use_cache=False, logits_to_keep=1)

    return time_iters(step, iters)


def decode_step(model, batch: int, ctx: int):
    """(step, cache): a one-token eager decode step on a new DynamicCache prefilled with ctx
    tokens; each call grows the cache by one token."""
    import torch
    from transformers import DynamicCache

    vocab = model.config.vocab_size
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        ids = torch.randint(0, vocab, (batch, ctx), device="cuda")
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = torch.randint(0, vocab, (batch, 1), device="cuda")

    @torch.no_grad()
    def step():
        model(input_ids=tok, past_key_values=cache, use_cache=True)

    return step, cache


def run_decode_eager(model, batch: int, ctx: int, iters: int) -> list[float]:
    """One-token steps on a DynamicCache holding ctx tokens (grows by one per step)."""
    return time_iters(decode_step(model, batch, ctx)[0], iters)


def run_decode_graph(model, batch: int, ctx: int, iters: int) -> list[float]:
    """One-token steps on a StaticCache, captured once in a CUDA graph and replayed."""
    import torch
    from transformers import StaticCache

    vocab = model.config.vocab_size
    warmup = 3
    cache = StaticCache(config=model.config, max_cache_len=ctx + warmup + iters + 8)
    with torch.no_grad():
        ids = torch.randint(0, vocab, (batch, ctx), device="cuda")
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = torch.randint(0, vocab, (batch, 1), device="cuda")
    pos = torch.tensor([ctx], device="cuda")

    def fwd():
        return model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)

    # Warm up on a side stream (allocations, handles), then capture the graph.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(2):
            fwd()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        fwd()
    return time_iters(graph.replay, iters, warmup=warmup)


def run_train(model, batch: int, seq: int, iters: int) -> list[float]:
    import torch

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)  # PyTorch's default: foreach
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device="cuda")

    def step():
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return time_iters(step, iters, warmup=2)


def launch_costs(n: int = 2000) -> dict:
    """Per-kernel host dispatch (eager), graph-replay cost and the event-timed tiny-kernel floor.

    These are inputs to the model's parameters (host_dispatch_s, graph_launch_s, kernel_floor_s).
    """
    import torch
    import torch.nn.functional as F

    x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(1, 8, 16, 64, device="cuda", dtype=torch.bfloat16)
    nw = torch.ones(64, device="cuda", dtype=torch.bfloat16)
    kernels = {
        "add": lambda: x.add(1.0),
        "mul": lambda: x * x,
        "linear": lambda: F.linear(x, w),
        "rms_norm": lambda: F.rms_norm(x, (64,), nw),
        "sdpa": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "cast_fp32": lambda: x.to(torch.float32),
    }
    out: dict = {}
    for name, fn in kernels.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t_host = (time.perf_counter() - t0) / n
        torch.cuda.synchronize()
        t_total = (time.perf_counter() - t0) / n
        out[f"host_dispatch_us/{name}"] = t_host * 1e6
        out[f"eager_per_kernel_us/{name}"] = t_total * 1e6
    # Graph replay of n tiny adds: per-kernel cost inside a graph.
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(n):
            x.add_(1.0)
    g.replay()
    samples = time_iters(g.replay, 5, warmup=1)
    out["graph_per_kernel_us/add"] = statistics.median(samples) * 1e3 / n
    # One tiny kernel timed alone with an event pair: the floor a single launch shows.
    samples = time_iters(lambda: x.add_(1.0), 200, warmup=20)
    out["event_single_kernel_us/add"] = statistics.median(samples) * 1e3
    return out


def host_probe(model, batch: int, seq: int, ctx: int) -> dict:
    """Host time of one eager forward (Python returns before the GPU finishes) and the number of
    GPU kernels it launches (torch.profiler), for prefill and for a decode step on a DynamicCache.
    Host time over kernel count is the per-kernel dispatch cost the model's queue simulation uses.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    out: dict = {}
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device="cuda")
    model.eval()

    def prefill():
        model(input_ids=ids, use_cache=False, logits_to_keep=1)

    decode, _ = decode_step(model, batch, ctx)

    for name, fn in (("prefill", prefill), ("decode", decode)):
        with torch.no_grad():
            for _ in range(3):
                fn()
            hosts = []
            for _ in range(5):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                hosts.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
        kernels = sum(
            e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA
        )
        out[name] = {
            "host_ms": statistics.median(hosts) * 1e3,
            "cuda_kernels": kernels,
            "batch": batch,
            "seq": seq,
            "ctx": ctx,
        }
    return out


PLAN = [
    # (model, mode, impl, cuda_graphs, batch, seq, ctx)
    ("llama2-7b", "prefill", "eager", False, 1, 2048, 0),
    ("llama2-7b", "prefill", "eager", False, 1, 512, 0),
    ("llama2-7b", "prefill", "eager", False, 4, 4096, 0),
    ("llama2-7b", "decode", "eager", False, 1, 0, 2048),
    ("llama2-7b", "decode", "eager", False, 16, 0, 2048),
    ("llama2-7b", "decode", "eager", True, 1, 0, 2048),
    ("llama2-7b", "decode", "eager", True, 16, 0, 2048),
    ("llama3-8b", "prefill", "eager", False, 1, 2048, 0),
    ("llama3-8b", "decode", "eager", False, 1, 0, 4096),
    ("llama3-8b", "decode", "eager", True, 8, 0, 4096),
    ("llama-1.1b", "train", "eager", False, 4, 2048, 0),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for e2e_hf.json")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--only", default="", help="comma list of model names to run")
    args = ap.parse_args()
    import torch

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"env": env_stamp(), "runs": []}
    path = out_dir / "e2e_hf.json"
    try:
        result["launch"] = launch_costs()
        print("launch costs:", json.dumps(result["launch"]), flush=True)
    except Exception as exc:  # noqa: BLE001 - record and go on
        result["launch_error"] = f"{type(exc).__name__}: {exc}"
    path.write_text(json.dumps(result, indent=1))
    only = set(filter(None, args.only.split(",")))
    current_name, model = None, None
    for name, mode, impl, graphs, batch, seq, ctx in PLAN:
        if only and name not in only:
            continue
        cfg = load_config(name)
        run = {
            "model": name,
            "config": cfg,
            "scenario": {
                "mode": mode,
                "impl": impl,
                "cuda_graphs": graphs,
                "batch": batch,
                "seq": seq or None,
                "ctx": ctx or None,
                "dtype": "bf16",
            },
        }
        t0 = time.time()
        try:
            if name != current_name:
                model = None
                torch.cuda.empty_cache()
                model = build_model(cfg)
                current_name = name
            if name == "llama2-7b" and "host_probe" not in result:
                try:
                    result["host_probe"] = host_probe(model, 1, 128, 2048)
                    print("host probe:", json.dumps(result["host_probe"]), flush=True)
                except Exception as exc:  # noqa: BLE001
                    result["host_probe_error"] = f"{type(exc).__name__}: {exc}"
            if mode == "prefill":
                model.eval()
                samples = run_prefill(model, batch, seq, args.iters)
            elif mode == "decode" and not graphs:
                model.eval()
                samples = run_decode_eager(model, batch, ctx, args.iters)
                run["note"] = "DynamicCache grows by one token per timed step"
            elif mode == "decode":
                model.eval()
                samples = run_decode_graph(model, batch, ctx, args.iters)
                run["note"] = "StaticCache (max_cache_len = ctx + steps + 8), CUDA graph replay"
            else:
                samples = run_train(model, batch, seq, args.iters)
                run["note"] = "bf16 params, default (foreach) AdamW with bf16 states, HF loss"
            run["samples_ms"] = samples
            run["measured_ms"] = statistics.median(samples)
        except Exception as exc:  # noqa: BLE001 - record and go on
            run["error"] = f"{type(exc).__name__}: {exc}"
            run["traceback"] = traceback.format_exc()[-2000:]
            if isinstance(exc, torch.OutOfMemoryError):
                model, current_name = None, None
                torch.cuda.empty_cache()
        run["wall_s"] = round(time.time() - t0, 1)
        result["runs"].append(run)
        path.write_text(json.dumps(result, indent=1))
        shown = f"{run['measured_ms']:.3f} ms" if "measured_ms" in run else run["error"][:200]
        print(
            f"{name:10s} {mode:7s} graphs={graphs!s:5s} b={batch} s={seq} ctx={ctx}: {shown}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    sys.exit(main())
