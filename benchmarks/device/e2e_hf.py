"""End-to-end reference runs on a GPU: Hugging Face transformers models with random bf16 weights.

Run on the device machine from the repository root:

    python3 benchmarks/device/e2e_hf.py --out "$OUT" [--plan PLAN] [--only NAMES]

(PLAN: llama, moe, moetrain, moetrain2, ckpt, swa, families, hosts, trainfam, trainfam2, unseen,
ckpthost, newfam, memheld, memheld2, batched, batched2 or batchedprof.)

Writes e2e_<plan>.json (e2e_hf.json for the llama plan): for each run the model config (HF
config.json form), the scenario, the measured time per step (median of per-iteration CUDA-event
samples, all samples kept) and the environment; with --profile, one step's GPU kernels from
torch.profiler (name, count, total time), the ground truth for the op list the model predicts.
benchmarks/accuracy.py predicts the same scenarios with the current model and compares.
Each file also probes its machine's host: tiny kernels' launch costs, cuDNN's plan time and a
few Python calls (`launch`), and a narrow 32-layer Llama's eager decode step on met and new kv
lengths before and after the runs (`hf_probe`, `hf_probe_end`: what the host costs a Hugging
Face step; gpuperf/perfmodel/host_pool.py takes the pool's median machine from it).

Plans:
- llama: Llamas: eager prefill (SDPA), decode on a DynamicCache (eager: every step concatenates
  the whole KV cache), decode on a StaticCache captured in a CUDA graph, a training step (forward,
  backward, foreach AdamW) of a ~1.1B Llama.
- moe: MoE models as transformers 5.17 runs them (grouped_mm experts): a Mixtral-, a Qwen3-MoE-,
  a Qwen1.5-MoE- (shared expert) and a DeepSeek-V3-shaped model (MLA, sigmoid group router,
  shared expert, a first dense layer), a few layers each; prefill and eager decode.
- moetrain: training steps of the Mixtral-, Qwen3-MoE- and Qwen1.5-MoE-shaped models;
  moetrain2: of a DeepSeek-V3-shaped one (a dense and an MoE layer of 64 of its experts),
  which no training run met.
- ckpt: training steps with and without gradient checkpointing
  (model.gradient_checkpointing_enable()).
- trainfam: the same for seven families (Llama-3.2, Gemma-3, Phi-3, GPT-2, Qwen2, Qwen3,
  GPT-NeoX) no training run had met.
- swa: a Mistral-shaped prefill with and without its 4096-token sliding window.
- families: dense families other than Llama at their published sizes (Qwen2, Qwen3, Gemma 2 and
  3, Phi-3, Falcon, Nemotron, GPT-BigCode, GPT-2, GPT-NeoX), after Llama-3-8B on the same host:
  eager prefill, eager decode on a DynamicCache, decode on a StaticCache as a CUDA graph.
- unseen: shapes and modes no run had met, GPU-bound (UNSEEN_PLAN).
- ckpthost: small models' training steps on few tokens, plain and checkpointed, where the host
  sets much of the pace (CKPT_HOST_PLAN).
- batched: serving-sized batches, CUDA-graph decode of 4-256 sequences on 1K-32K tokens of
  cache and batched prefill (BATCHED_PLAN); batched2: its runs that ran out of memory on the H100,
  with the allocator's expandable segments; batchedprof: its attention-bound misses, to run with
  --profile (a CUDA-graph decode then profiles the same step run eagerly).
A run that fails records its error and the others go on.
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
DEV = "cuda"  # --device cpu: a smoke test of the plans on tiny shapes (--tiny)
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

    if DEV != "cuda":
        return {"gpu": "cpu (smoke test)", "torch": torch.__version__}
    env = {
        "gpu": torch.cuda.get_device_name(0),
        "gpu_count": torch.cuda.device_count(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
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
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):  # the caching allocator's settings
        env["pytorch_cuda_alloc_conf"] = os.environ["PYTORCH_CUDA_ALLOC_CONF"]
    return env


def cpu_name() -> str:
    """The host CPU's model name (eager runs are host-bound: the CPU is part of the result)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


# Llama-3.2-3B's shape (meta-llama/Llama-3.2-3B config.json, without its rope_scaling).
LLAMA_3B = {
    "model_type": "llama", "hidden_size": 3072, "intermediate_size": 8192,
    "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
}  # fmt: skip
# Qwen/Qwen3-30B-A3B config.json (128 experts, top 8, expert width 768).
QWEN3_MOE = {
    "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip
# Qwen/Qwen1.5-MoE-A2.7B config.json (qwen2_moe: 60 experts, top 4, a gated shared expert).
QWEN2_MOE = {
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
    "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "num_experts": 60, "num_experts_per_tok": 4, "norm_topk_prob": False,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
    "max_position_embeddings": 8192, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip
# deepseek-ai/DeepSeek-V3 config.json (without rope_scaling and the MTP layer).
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "first_k_dense_replace": 3,
    "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8,
    "topk_group": 4, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1,
    "vocab_size": 129280, "max_position_embeddings": 163840, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "hidden_act": "silu",
    "attention_bias": False,
}  # fmt: skip


# Qwen/Qwen3-8B config.json.
QWEN3_8B = {
    "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
    "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000, "attention_bias": False,
    "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}  # fmt: skip
# openai-community/gpt2-xl config.json.
GPT2_XL = {
    "model_type": "gpt2", "activation_function": "gelu_new", "n_ctx": 1024, "n_embd": 1600,
    "n_head": 25, "n_layer": 48, "n_positions": 1024, "layer_norm_epsilon": 1e-5,
    "vocab_size": 50257,
}  # fmt: skip
# EleutherAI/pythia-6.9b config.json.
PYTHIA_6_9B = {
    "model_type": "gpt_neox", "hidden_act": "gelu", "hidden_size": 4096,
    "intermediate_size": 16384, "layer_norm_eps": 1e-5, "max_position_embeddings": 2048,
    "num_attention_heads": 32, "num_hidden_layers": 32, "rotary_emb_base": 10000,
    "rotary_pct": 0.25, "tie_word_embeddings": False, "use_parallel_residual": True,
    "vocab_size": 50432,
}  # fmt: skip
# Published configs the loader's tests read (tests/unit/data/hf_configs, each with its source).
HF_CONFIGS = ROOT / "tests" / "unit" / "data" / "hf_configs"


def _hf(name: str) -> dict:
    cfg = json.loads((HF_CONFIGS / f"{name}.json").read_text())
    return {k: v for k, v in cfg.items() if not k.startswith("_")}


def _few_layers(cfg: dict, layers: int, **more) -> dict:  # noqa: ANN003
    cut = {"layer_types": cfg["layer_types"][:layers]} if "layer_types" in cfg else {}
    return {**cfg, "num_hidden_layers": layers, **cut, **more}


def _preset(name: str) -> dict:
    return json.loads((PRESETS / f"{name}.json").read_text())


# Models the plans name: a preset, or one of the shapes above cut to a few layers.
CONFIGS = {
    "llama-1.1b": lambda: dict(TRAIN_1B),
    "llama-3b": lambda: dict(LLAMA_3B),
    "mixtral-4l": lambda: _few_layers(_preset("mixtral-8x7b"), 4),
    "qwen3-moe-8l": lambda: _few_layers(QWEN3_MOE, 8),
    "qwen1.5-moe-8l": lambda: _few_layers(QWEN2_MOE, 8),
    "deepseek-v3-3l": lambda: _few_layers(DEEPSEEK_V3, 3, first_k_dense_replace=1),
    "mixtral-2l": lambda: _few_layers(_preset("mixtral-8x7b"), 2),
    "qwen3-moe-4l": lambda: _few_layers(QWEN3_MOE, 4),
    "qwen1.5-moe-4l": lambda: _few_layers(QWEN2_MOE, 4),
    "deepseek-v3-2l-e64": lambda: _few_layers(
        DEEPSEEK_V3, 2, first_k_dense_replace=1, n_routed_experts=64
    ),
    "mistral-4l-swa": lambda: _few_layers(_preset("mistral-7b"), 4),
    "mistral-4l-full": lambda: _few_layers(_preset("mistral-7b"), 4, sliding_window=None),
    "qwen3-8b": lambda: dict(QWEN3_8B),
    "gemma-3-1b": lambda: _hf("gemma-3-1b-pt"),
    "phi-3-mini": lambda: _hf("phi-3-mini-4k-instruct"),
    "falcon-7b": lambda: _hf("falcon-7b"),
    "minitron-8b": lambda: _hf("minitron-8b-base"),
    "starcoder": lambda: _hf("starcoder"),
    "gpt2-xl": lambda: dict(GPT2_XL),
    "pythia-6.9b": lambda: dict(PYTHIA_6_9B),
    "llama3.2-1b": lambda: _preset("llama3.2-1b"),
    "qwen2-7b-8l": lambda: _few_layers(_preset("qwen2-7b"), 8),
    "qwen3-8b-8l": lambda: _few_layers(dict(QWEN3_8B), 8),
    "pythia-6.9b-8l": lambda: _few_layers(dict(PYTHIA_6_9B), 8),
    "gemma2-9b-6l": lambda: _few_layers(_preset("gemma2-9b"), 6),
    "mistral-7b-8l": lambda: _few_layers(_preset("mistral-7b"), 8),
    "minitron-8b-8l": lambda: _few_layers(_hf("minitron-8b-base"), 8),
    "starcoder-6l": lambda: _few_layers(_hf("starcoder"), 6),
    "falcon-7b-8l": lambda: _few_layers(_hf("falcon-7b"), 8),
    "qwen3-0.6b": lambda: _hf("qwen3-0.6b"),
    "gemma-3-4b-8l": lambda: _few_layers(_hf("gemma-3-4b-pt")["text_config"], 8),
    "deepseek-v2-lite-4l": lambda: _few_layers(_hf("deepseek-v2-lite"), 4),
    "falcon-40b-4l": lambda: _few_layers(_hf("falcon-40b"), 4),
    "nemotron-4-15b-4l": lambda: _few_layers(_hf("nemotron-4-15b"), 4),
    "llama2-13b-8l": lambda: _few_layers(_preset("llama2-13b"), 8),
    "qwen3-32b-4l": lambda: _few_layers(_preset("qwen3-32b"), 4),
    "llama3-8b-8l": lambda: _few_layers(_preset("llama3-8b"), 8),
    "gemma-7b": lambda: _hf("gemma-7b"),
    "starcoder2-7b": lambda: _hf("starcoder2-7b"),
    "granite-3.1-8b": lambda: _hf("granite-3.1-8b"),
    "gemma-7b-8l": lambda: _few_layers(_hf("gemma-7b"), 8),
    "starcoder2-7b-8l": lambda: _few_layers(_hf("starcoder2-7b"), 8),
    "granite-3.1-8b-8l": lambda: _few_layers(_hf("granite-3.1-8b"), 8),
    "olmo2-7b": lambda: _hf("olmo2-7b"),
    "olmo2-7b-8l": lambda: _few_layers(_hf("olmo2-7b"), 8),
    "phi-2": lambda: _hf("phi-2"),
    "phi-2-8l": lambda: _few_layers(_hf("phi-2"), 8),
}


TINY = {"hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 256, "num_attention_heads": 4, "head_dim": 64,
        "num_key_value_heads": 2, "num_kv_heads": 2, "vocab_size": 1000, "q_lora_rank": 64,
        "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
        "num_hidden_layers": 2, "n_embd": 256, "n_inner": 512, "n_head": 4,
        "n_layer": 2}  # fmt: skip


def load_config(name: str, tiny: bool = False) -> dict:
    cfg = CONFIGS[name]() if name in CONFIGS else _preset(name)
    if tiny:  # same code paths on small shapes: keys the family has, made small
        mha = cfg.get("num_key_value_heads") == cfg.get("num_attention_heads")
        cfg.update({k: v for k, v in TINY.items() if k in cfg})
        if mha and "num_attention_heads" in cfg or cfg.get("model_type", "").startswith("deepseek"):
            cfg["num_key_value_heads"] = cfg["num_attention_heads"]  # MHA stays MHA
        if cfg.get("model_type") == "phi":  # 0.4 of the tiny head (64) is an odd rotary width
            cfg["partial_rotary_factor"] = 0.5
        if "layer_types" in cfg:  # one type per layer (GPT-OSS's alternating windows)
            cfg["layer_types"] = cfg["layer_types"][: cfg["num_hidden_layers"]]
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):  # inside the small vocab
            if isinstance(cfg.get(key), int) and cfg[key] >= cfg["vocab_size"]:
                cfg[key] = 0
    return cfg


def tiny_layers(name: str, layers: int) -> dict:
    """load_config(name, tiny=True) with `layers` decoder layers (the host probes build each
    family at two depths: the difference is the layers' cost without the model call's own)."""
    cfg = load_config(name, tiny=True)
    for key in ("num_hidden_layers", "n_layer"):
        if key in cfg:
            cfg[key] = layers
    return cfg


def build_model(cfg_dict: dict):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = {k: v for k, v in cfg_dict.items() if not k.startswith("_")}
    cfg = AutoConfig.for_model(**d)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(DEV):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    return model.to(torch.bfloat16)


def sync() -> None:
    import torch

    if DEV == "cuda":
        torch.cuda.synchronize()


def time_iters(fn, iters: int, warmup: int = 3) -> list[float]:
    """Per-iteration CUDA-event times in ms, after `warmup` untimed calls (host clock on CPU)."""
    import torch

    for _ in range(warmup):
        fn()
    if DEV != "cuda":
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
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

    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=DEV)

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
        ids = torch.randint(0, vocab, (batch, ctx), device=DEV)
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = torch.randint(0, vocab, (batch, 1), device=DEV)

    @torch.no_grad()
    def step():
        model(input_ids=tok, past_key_values=cache, use_cache=True)

    return step, cache


def run_decode_eager(model, batch: int, ctx: int, iters: int) -> list[float]:
    """One-token steps on a DynamicCache holding ctx tokens (grows by one per step)."""
    return time_iters(decode_step(model, batch, ctx)[0], iters)


def static_step(model, batch: int, ctx: int, max_len: int):
    """A one-token decode step (call it under no_grad) on a new StaticCache of `max_len` tokens,
    prefilled with ctx; the step's inputs stay alive with it."""
    import torch
    from transformers import StaticCache

    vocab = model.config.vocab_size
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    with torch.no_grad():
        ids = torch.randint(0, vocab, (batch, ctx), device=DEV)
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = torch.randint(0, vocab, (batch, 1), device=DEV)
    pos = torch.tensor([ctx], device=DEV)

    def fwd():
        return model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)

    return fwd


def run_decode_graph(model, batch: int, ctx: int, iters: int) -> list[float]:
    """One-token steps on a StaticCache, captured once in a CUDA graph and replayed."""
    import torch

    warmup = 3
    fwd = static_step(model, batch, ctx, ctx + warmup + iters + 8)
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


def static_step_profile(model, batch: int, ctx: int) -> dict:
    """The kernels of one StaticCache decode step run eagerly on a cache of its own: the ones a
    CUDA graph of the step replays (a graph's replay hides them from the profiler)."""
    import torch

    fwd = torch.no_grad()(static_step(model, batch, ctx, ctx + 21))
    fwd()  # cuDNN's plan and the allocations, outside the profile
    return kernel_profile(fwd)


def run_train(model, batch: int, seq: int, iters: int, ckpt: bool = False,
              profile: dict | None = None) -> list[float]:  # fmt: skip
    """Timed training steps; with `profile` (a dict), one more step's kernel profile into it."""
    import torch

    model.train()
    if ckpt:  # as a user turns it on: each decoder layer's forward runs again in backward
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)  # PyTorch's default: foreach
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=DEV)

    def step():
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    samples = time_iters(step, iters, warmup=2)
    if profile is not None:
        profile.update(kernel_profile(step))
    return samples


def launch_costs(n: int = 2000) -> dict:
    """Per-kernel host dispatch (eager), graph-replay cost and the event-timed tiny-kernel floor.

    These are inputs to the model's parameters (host_dispatch_s, graph_launch_s, kernel_floor_s).
    """
    import torch
    import torch.nn.functional as F

    x = torch.randn(64, 64, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(64, 64, device=DEV, dtype=torch.bfloat16)
    q = torch.randn(1, 8, 16, 64, device=DEV, dtype=torch.bfloat16)
    nw = torch.ones(64, device=DEV, dtype=torch.bfloat16)
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
    # cuDNN's SDPA plans every attention shape it has not met (a decode step on a growing cache
    # meets a new kv length): this host's plan time, as `gpuperf calibrate` measures it.
    sys.path.insert(0, str(ROOT))
    from gpuperf.measure.calibration import measure_attn_plan

    out["attn_plan_ms"] = measure_attn_plan(DEV) * 1e3
    out.update(python_costs(x))
    return out


def python_costs(x, n: int = 20000) -> dict:
    """Host work a Hugging Face step does besides launching kernels, per call in µs: a pure
    Python call with an attribute and a dict lookup, an nn.Module __call__ of a module that
    launches nothing, and a view of a CUDA tensor (no kernel). Recorded to see whether machines
    that run HF steps slower than their launch costs imply are slower here (not a model input)."""
    import torch

    class Probe:
        def __init__(self) -> None:
            self.table = {"k": 1}

        def step(self, v: int) -> int:
            return self.table["k"] + v

    class Nothing(torch.nn.Module):
        def forward(self, t):
            return t

    p, mod = Probe(), Nothing()
    calls = {
        "python_call_us": lambda: p.step(1),
        "module_call_us": lambda: mod(x),
        "view_us": lambda: x.view(4096),
    }
    out = {}
    for name, fn in calls.items():
        for _ in range(1000):
            fn()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out[f"python/{name}"] = (time.perf_counter() - t0) / n * 1e6
    return out


# A Llama-3-shaped decoder (GQA 4:1, 32 layers like Llama-3-8B) at a width whose kernels take a
# few µs: its eager decode step is the host's work, kernel by kernel, as Hugging Face issues
# them (Python, module calls, views, dispatch), with almost no GPU time behind it.
HF_PROBE_CONFIG = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 32, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
    "vocab_size": 2048, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip


def hf_host_probe(ctx: int = 512, steps: int = 16) -> dict:
    """This machine's host as a Hugging Face decode step uses it: HF_PROBE_CONFIG's eager decode
    steps on a DynamicCache, first on kv lengths the process has not met (cuDNN plans each), then
    the cache cropped back and the same lengths again (planned before). Step times in ms."""
    import torch

    model = build_model(HF_PROBE_CONFIG)
    model.eval()
    step, cache = decode_step(model, 1, ctx)
    new = time_iters(step, steps, warmup=0)
    cache.crop(-steps)  # back to ctx tokens
    seen = time_iters(step, steps, warmup=0)
    del model, cache, step
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return {"config": HF_PROBE_CONFIG, "batch": 1, "ctx": ctx,
            "new_lengths_ms": new, "seen_lengths_ms": seen,
            "new_ms": statistics.median(new[1:]),
            "seen_ms": statistics.median(seen[1:])}  # fmt: skip


def host_forward(fn, reps: int = 5) -> dict:
    """Host time of one call of `fn` (Python returns before the GPU finishes: the median of
    `reps` calls after 3 warm-ups, each from an idle GPU) and the GPU kernels one call launches
    (torch.profiler), under no_grad."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        for _ in range(3):
            fn()
        hosts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            hosts.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    kernels = sum(
        e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA
    )
    return {"host_ms": statistics.median(hosts), "host_samples_ms": hosts, "cuda_kernels": kernels}


def host_probe(model, batch: int, seq: int, ctx: int) -> dict:
    """Host time of one eager forward (Python returns before the GPU finishes) and the number of
    GPU kernels it launches (torch.profiler), for prefill and for a decode step on a DynamicCache.
    Host time over kernel count is the per-kernel dispatch cost the model's queue simulation uses.
    """
    import torch

    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=DEV)
    model.eval()

    def prefill():
        model(input_ids=ids, use_cache=False, logits_to_keep=1)

    decode, _ = decode_step(model, batch, ctx)
    return {name: {**host_forward(fn), "batch": batch, "seq": seq, "ctx": ctx}
            for name, fn in (("prefill", prefill), ("decode", decode))}  # fmt: skip


def kernel_profile(fn, top: int = 60) -> dict:
    """One call of fn under torch.profiler: its GPU kernels by name (count, total us), the `top`
    longest in total and the totals over all of them; and the host ops with the most self CPU
    time (count, self us), where the host's time goes."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if DEV != "cuda":
        fn()
        return {"kernels": 0, "gpu_us": 0.0, "top": [], "host_top": []}
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows, host = [], []
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
            rows.append({"name": e.key[:200], "count": e.count, "total_us": total})
        else:
            host.append({"name": e.key[:120], "count": e.count,
                         "self_us": e.self_cpu_time_total})  # fmt: skip
    rows.sort(key=lambda r: -r["total_us"])
    host.sort(key=lambda r: -r["self_us"])
    return {
        "kernels": sum(r["count"] for r in rows),
        "gpu_us": sum(r["total_us"] for r in rows),
        "top": rows[:top],
        "host_self_us": sum(r["self_us"] for r in host),
        "host_top": host[:40],
    }


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
MOE_PLAN = [
    (model, mode, "eager", False, batch, seq, ctx)
    for model in ("mixtral-4l", "qwen3-moe-8l", "qwen1.5-moe-8l", "deepseek-v3-3l")
    for mode, batch, seq, ctx in (
        ("prefill", 1, 2048, 0),
        ("prefill", 1, 512, 0),
        ("decode", 1, 0, 1024),
        ("decode", 8, 0, 1024),
    )
]
# MoE training steps (grouped_mm experts and their autograd), cut to fit AdamW's states beside
# the weights on one GPU; all held out.
MOE_TRAIN_PLAN = [
    (model, "train", "eager", False, batch, 2048, 0)
    for model in ("mixtral-2l", "qwen3-moe-4l", "qwen1.5-moe-4l")
    for batch in (1, 4)
]
# MoE training steps of a family the moetrain plan did not have (DeepSeek-V3's MLA, shared
# expert, sigmoid group router and a first dense layer), with 64 of its 256 experts so that
# AdamW's states fit beside the weights on one GPU: all held out. (GPT-OSS's attention sinks
# have no SDPA path in transformers 5.17.)
MOE_TRAIN_2_PLAN = [
    ("deepseek-v3-2l-e64", "train", "eager", False, batch, 2048, 0) for batch in (1, 2, 4)
]
CKPT_PLAN = [  # (..., gradient checkpointing) as the 8th field
    ("llama-1.1b", "train", "eager", False, 4, 2048, 0, True),
    ("llama-3b", "train", "eager", False, 2, 2048, 0, False),
    ("llama-3b", "train", "eager", False, 2, 2048, 0, True),
    ("llama-3b", "train", "eager", False, 4, 2048, 0, True),
]
SWA_PLAN = [
    ("mistral-4l-swa", "prefill", "eager", False, 1, 8192, 0),
    ("mistral-4l-full", "prefill", "eager", False, 1, 8192, 0),
    ("mistral-4l-swa", "prefill", "eager", False, 1, 4096, 0),
    ("mistral-4l-swa", "decode", "eager", False, 1, 0, 8192),
]
# GPT-2 learns 1,024 positions: its runs stay within them. Each model decodes over kv lengths
# of its own (ctx + 16 i): cuDNN plans a shape once per process, and Qwen3-8B's attention has
# Llama-3-8B's shape (the first run of this plan met Llama's lengths and planned nothing).
FAMILIES_PLAN = [
    (model, mode, "eager", graphs, batch, seq // (2 if model == "gpt2-xl" else 1),
     (ctx + 16 * i) // (4 if model == "gpt2-xl" else 1) if ctx else 0)
    for i, model in enumerate(("llama3-8b", "qwen2-7b", "qwen3-8b", "gemma2-9b", "gemma-3-1b",
                               "phi-3-mini", "falcon-7b", "minitron-8b", "starcoder", "gpt2-xl",
                               "pythia-6.9b"))
    for mode, graphs, batch, seq, ctx in (
        ("prefill", False, 1, 2048, 0),
        ("decode", False, 1, 0, 2048),
        ("decode", True, 8, 0, 2048),
    )
]  # fmt: skip
# One machine's eager decode across the families, dense and MoE (the host is what sets an eager
# step's time): a new machine of the pool, each model on kv lengths of its own. No llama2-7b:
# the calibration model's runs would enter `gpuperf calibrate --from`'s host fit (the first two
# machines' are in e2e_hosts_*.json, excluded).
HOSTS_PLAN = [
    (model, "decode", "eager", False, 1, 0,
     (ctx + 16 * i) // (4 if model == "gpt2-xl" else 1))
    for i, (model, ctx) in enumerate(
        [("llama3-8b", 2048)]
        + [(m, 2048) for m in ("qwen2-7b", "qwen3-8b", "gemma2-9b", "phi-3-mini", "minitron-8b",
                               "starcoder", "gpt2-xl", "pythia-6.9b")]
        + [(m, 1024) for m in ("mixtral-4l", "qwen3-moe-8l", "qwen1.5-moe-8l", "deepseek-v3-3l")]
        + [("llama3-8b", 4096)]  # the length of e2e_hf_run*.json's Llama-3-8B decode
    )
]  # fmt: skip


def _train_plan(shapes: tuple[tuple[str, int, int], ...]) -> list[tuple]:
    """A training step of each (model, batch, seq), without and with gradient checkpointing."""
    return [(model, "train", "eager", False, batch, seq, 0, ckpt)
            for model, batch, seq in shapes for ckpt in (False, True)]  # fmt: skip


# Training steps of families no training fit has met (GPU-bound: the host hardly matters); the
# 7-8B shapes cut to 8 layers to leave AdamW room.
TRAIN_FAMILIES_PLAN = _train_plan((("llama3.2-1b", 4, 2048), ("gemma-3-1b", 4, 2048),
                                   ("phi-3-mini", 2, 2048), ("gpt2-xl", 4, 1024),
                                   ("qwen2-7b-8l", 2, 2048), ("qwen3-8b-8l", 2, 2048),
                                   ("pythia-6.9b-8l", 2, 2048)))  # fmt: skip
# Five more (run after the eager RMSNorm backward was fixed on trainfam's): Gemma-2, Mistral,
# Nemotron (squared ReLU, LayerNorm1P), GPT-BigCode (multi-query), Falcon (parallel attention).
TRAIN_FAMILIES_2_PLAN = _train_plan((("gemma2-9b-6l", 2, 2048), ("mistral-7b-8l", 2, 2048),
                                     ("minitron-8b-8l", 2, 2048), ("starcoder-6l", 2, 2048),
                                     ("falcon-7b-8l", 2, 2048)))  # fmt: skip
# Small models' training steps on fewer tokens, where the host sets much of a checkpointed
# step's pace (each layer's forward runs again from Python inside the backward): checks of
# the training host model (train_host_probe.py measured its per-phase host costs).
CKPT_HOST_PLAN = _train_plan((("gemma-3-1b", 1, 2048), ("gpt2-xl", 1, 1024),
                              ("qwen3-0.6b", 2, 2048), ("llama3.2-1b", 1, 2048)))  # fmt: skip
# Shapes and modes no run had met, chosen where the GPU sets the pace (the host hardly
# matters): batched and long prefills (sliding windows past their length, 32k tokens), MLA with
# 64 experts, CUDA-graph decode at batch 16-64, training of a 0.6B and a 15B-wide model.
UNSEEN_PLAN = [
    ("qwen3-0.6b", "prefill", "eager", False, 8, 2048, 0),
    ("qwen3-0.6b", "train", "eager", False, 8, 2048, 0),
    ("gemma-3-4b-8l", "prefill", "eager", False, 1, 8192, 0),
    ("deepseek-v2-lite-4l", "prefill", "eager", False, 1, 4096, 0),
    ("falcon-40b-4l", "prefill", "eager", False, 1, 4096, 0),
    ("nemotron-4-15b-4l", "train", "eager", False, 2, 2048, 0),
    ("llama2-13b-8l", "decode", "eager", True, 32, 0, 2048),
    ("qwen3-32b-4l", "decode", "eager", True, 64, 0, 1024),
    ("mistral-7b-8l", "prefill", "eager", False, 1, 16384, 0),
    ("llama3-8b-8l", "prefill", "eager", False, 1, 32768, 0),
    ("qwen1.5-moe-8l", "prefill", "eager", False, 4, 2048, 0),
    ("phi-3-mini", "decode", "eager", True, 32, 0, 1024),
    ("gemma2-9b-6l", "decode", "eager", True, 16, 0, 6144),
    ("starcoder-6l", "prefill", "eager", False, 4, 2048, 0),
    ("gpt2-xl", "train", "eager", False, 8, 1024, 0),
    ("llama3.2-1b", "train", "eager", False, 8, 1024, 0, True),
]  # fmt: skip
# Families the loader took on after every run above (Gemma 1, StarCoder2, Granite, OLMo-2,
# Phi-2; their kernels checked against the CPU traces only): full-size inference as
# FAMILIES_PLAN runs it, 8-layer training cuts. All held out.
NEW_FAMILIES_PLAN = [
    (model, mode, "eager", graphs, batch, seq, ctx + 16 * i if ctx else 0)
    for i, model in enumerate(("gemma-7b", "starcoder2-7b", "granite-3.1-8b", "olmo2-7b",
                               "phi-2"))
    for mode, graphs, batch, seq, ctx in (
        ("prefill", False, 1, 2048, 0),
        ("decode", False, 1, 0, 2048),
        ("decode", True, 8, 0, 2048),
    )
] + _train_plan((("gemma-7b-8l", 2, 2048), ("starcoder2-7b-8l", 2, 2048),
                 ("granite-3.1-8b-8l", 2, 2048), ("olmo2-7b-8l", 2, 2048),
                 ("phi-2-8l", 2, 2048)))  # fmt: skip

# Peak memory of training steps at shapes no memory model was written against (written after
# the eager training memory model, 2026-11-25): every mechanism at another balance of
# logits, layer activations, gradients and AdamW's states; held out.
MEMORY_HELD_PLAN = _train_plan((("qwen3-0.6b", 4, 4096), ("llama3.2-1b", 2, 4096),
                                ("gemma-3-1b", 2, 3072), ("mistral-7b-8l", 4, 2048),
                                ("phi-2-8l", 4, 2048), ("gpt2-xl", 2, 1024),
                                ("falcon-7b-8l", 1, 2048), ("olmo2-7b-8l", 4, 2048),
                                ("starcoder2-7b-8l", 4, 1024), ("granite-3.1-8b-8l", 4, 1024),
                                ("qwen2-7b-8l", 1, 4096), ("mixtral-2l", 2, 2048),
                                ("qwen3-moe-4l", 2, 2048)))  # fmt: skip

# The same at full size on an H200's 141 GB (written after the review of the memory model):
# whole 4-9B models, where AdamW's step or the activations set the peak; held out.
MEMORY_HELD_2_PLAN = _train_plan((("llama3-8b", 1, 4096), ("qwen2-7b", 2, 2048),
                                  ("mistral-7b", 1, 8192), ("phi-3-mini", 4, 4096),
                                  ("gemma2-9b", 1, 2048), ("qwen3-8b", 2, 4096),
                                  ("llama3.2-1b", 16, 2048)))  # fmt: skip

# Serving-sized batches (written 2026-11-25, every run held out; predictions committed before
# the run): CUDA-graph decode at 4-256 sequences and 2K-32K tokens of cache, batched prefill.
# No whole-model run had decoded past 64 sequences or 8K tokens of cache, and few had prefilled
# more than one sequence; these are GPU-bound (the host hardly matters).
BATCHED_PLAN = [
    ("llama3-8b", "decode", "eager", True, 64, 0, 4096),
    ("llama3-8b", "decode", "eager", True, 128, 0, 2048),
    ("llama3-8b", "decode", "eager", True, 16, 0, 16384),
    ("llama3-8b", "decode", "eager", True, 4, 0, 32768),
    ("llama3-8b", "prefill", "eager", False, 8, 2048, 0),
    ("llama3-8b", "prefill", "eager", False, 2, 8192, 0),
    ("qwen2-7b", "decode", "eager", True, 64, 0, 4096),
    ("qwen2-7b", "decode", "eager", True, 16, 0, 16384),
    ("qwen2-7b", "prefill", "eager", False, 4, 4096, 0),
    ("qwen3-8b", "decode", "eager", True, 32, 0, 4096),
    ("qwen3-8b", "prefill", "eager", False, 16, 1024, 0),
    ("llama3.2-1b", "decode", "eager", True, 256, 0, 2048),
    ("llama3.2-1b", "decode", "eager", True, 64, 0, 8192),
    ("llama3.2-1b", "prefill", "eager", False, 32, 1024, 0),
    ("llama3.2-1b", "prefill", "eager", False, 8, 8192, 0),
    ("gemma2-9b", "decode", "eager", True, 64, 0, 2048),
    ("phi-3-mini", "decode", "eager", True, 64, 0, 1024),
]  # fmt: skip
# The attention-bound misses of BATCHED_PLAN on both GPUs, with --profile (the step's kernels;
# on an H100 Gemma-2-9B needs PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): Phi-3-mini
# (96-wide heads, no GQA), Gemma-2-9B (softcapped) and Llama-3-8B on 32K tokens of cache.
BATCHED_PROFILE_PLAN = [run for run in BATCHED_PLAN
                        if run[0] in ("phi-3-mini", "gemma2-9b") or run[6] == 32768]  # fmt: skip
# The four runs of BATCHED_PLAN that ran out of memory on the H100 (50 GiB allocated, 25 GiB
# reserved in pieces too small for the MLP's 7 GiB; the model predicts 72 GiB at the peak),
# again with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (recorded in env).
BATCHED_2_PLAN = [run for run in BATCHED_PLAN
                  if run[0] in ("llama3-8b", "gemma2-9b") and run[4] >= 16]  # fmt: skip

PLANS = {"llama": PLAN, "moe": MOE_PLAN, "moetrain": MOE_TRAIN_PLAN,
         "moetrain2": MOE_TRAIN_2_PLAN, "ckpt": CKPT_PLAN,
         "swa": SWA_PLAN,
         "families": FAMILIES_PLAN, "hosts": HOSTS_PLAN,
         "trainfam": TRAIN_FAMILIES_PLAN, "trainfam2": TRAIN_FAMILIES_2_PLAN,
         "unseen": UNSEEN_PLAN, "ckpthost": CKPT_HOST_PLAN,
         "newfam": NEW_FAMILIES_PLAN, "memheld": MEMORY_HELD_PLAN,
         "memheld2": MEMORY_HELD_2_PLAN, "batched": BATCHED_PLAN,
         "batched2": BATCHED_2_PLAN, "batchedprof": BATCHED_PROFILE_PLAN}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for e2e_hf.json")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--only", default="", help="comma list of model names to run")
    ap.add_argument("--plan", default="llama", choices=sorted(PLANS))
    ap.add_argument("--profile", action="store_true", help="record one step's GPU kernels")
    ap.add_argument("--max-minutes", type=float, default=0.0, help="skip what is left after")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test on the CPU)")
    args = ap.parse_args()
    global DEV
    DEV = args.device
    deadline = time.monotonic() + 60 * args.max_minutes if args.max_minutes else None
    import torch

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"env": env_stamp(), "runs": []}
    path = out_dir / ("e2e_hf.json" if args.plan == "llama" else f"e2e_{args.plan}.json")
    try:
        if DEV != "cuda":
            raise RuntimeError("launch costs are measured on a GPU")
        result["launch"] = launch_costs()
        print("launch costs:", json.dumps(result["launch"]), flush=True)
    except Exception as exc:  # noqa: BLE001 - record and go on
        result["launch_error"] = f"{type(exc).__name__}: {exc}"
    _probe_hf(result, "hf_probe")
    path.write_text(json.dumps(result, indent=1))
    only = set(filter(None, args.only.split(",")))
    current_name, model = None, None
    for name, mode, impl, graphs, batch, seq, ctx, *rest in PLANS[args.plan]:
        ckpt = bool(rest and rest[0])
        if only and name not in only:
            continue
        if deadline is not None and time.monotonic() > deadline:
            result["runs"].append({"model": name, "error": "skipped: deadline"})
            continue
        cfg = load_config(name, args.tiny)
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
                **({"recompute": "full"} if ckpt else {}),
            },
        }
        t0 = time.time()
        try:
            if name != current_name:
                model = None
                if DEV == "cuda":
                    torch.cuda.empty_cache()
                model = build_model(cfg)
                current_name = name
            for key in ("experts_implementation", "attn_implementation"):
                run[key] = getattr(model.config, f"_{key}", None)
            if DEV == "cuda":
                torch.cuda.reset_peak_memory_stats()
                torch.cuda.synchronize()
            if name == "llama2-7b" and "host_probe" not in result:
                try:
                    # lengths no timed run of the plans decodes on (cuDNN plans a length once)
                    result["host_probe"] = host_probe(model, 1, 128, 1000)
                    print("host probe:", json.dumps(result["host_probe"]), flush=True)
                except Exception as exc:  # noqa: BLE001
                    result["host_probe_error"] = f"{type(exc).__name__}: {exc}"
            if mode == "prefill":
                model.eval()
                samples = run_prefill(model, batch, seq, args.iters)
                if args.profile:
                    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=DEV)
                    with torch.no_grad():
                        run["profile"] = kernel_profile(
                            lambda ids=ids, m=model: m(
                                input_ids=ids, use_cache=False, logits_to_keep=1
                            )
                        )
            elif mode == "decode" and not graphs:
                model.eval()
                samples = run_decode_eager(model, batch, ctx, args.iters)
                run["note"] = "DynamicCache grows by one token per timed step"
                if args.profile:
                    run["profile"] = kernel_profile(decode_step(model, batch, ctx)[0])
            elif mode == "decode":
                model.eval()
                samples = run_decode_graph(model, batch, ctx, args.iters)
                run["note"] = "StaticCache (max_cache_len = ctx + steps + 8), CUDA graph replay"
                if args.profile:
                    if DEV == "cuda":  # the timed run's peak, not the profile's second cache
                        run["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
                    try:
                        run["profile"] = static_step_profile(model, batch, ctx)
                        run["profile"]["note"] = "the step run eagerly on a second StaticCache"
                    except Exception as exc:  # noqa: BLE001 - the timed run stands
                        run["profile_error"] = f"{type(exc).__name__}: {exc}"[:500]
            else:
                prof = {} if args.profile else None
                samples = run_train(model, batch, seq, args.iters, ckpt, prof)
                if prof:
                    run["profile"] = prof
                run["note"] = "bf16 params, default (foreach) AdamW with bf16 states, HF loss" + (
                    ", gradient_checkpointing_enable()" if ckpt else ""
                )
                if ckpt:
                    model.gradient_checkpointing_disable()
            if DEV == "cuda" and "peak_mem_gib" not in run:
                run["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
            run["samples_ms"] = samples
            run["measured_ms"] = statistics.median(samples)
        except Exception as exc:  # noqa: BLE001 - record and go on
            run["error"] = f"{type(exc).__name__}: {exc}"
            run["traceback"] = traceback.format_exc()[-2000:]
            if isinstance(exc, torch.OutOfMemoryError):
                model, current_name = None, None
                torch.cuda.empty_cache()
        model_train = model is not None and model.training
        if model_train:
            model.zero_grad(set_to_none=True)
        run["wall_s"] = round(time.time() - t0, 1)
        result["runs"].append(run)
        path.write_text(json.dumps(result, indent=1))
        shown = f"{run['measured_ms']:.3f} ms" if "measured_ms" in run else run["error"][:200]
        print(
            f"{name:10s} {mode:7s} graphs={graphs!s:5s} b={batch} s={seq} ctx={ctx}: {shown}",
            flush=True,
        )
    # The same probe after the runs (did the host drift?), on lengths the first had not met.
    _probe_hf(result, "hf_probe_end", ctx=768)
    path.write_text(json.dumps(result, indent=1))
    return 0


def probe_file(**fields) -> dict:  # noqa: ANN003
    """A probe's result file before its runs: the software, `fields`, the machine's launch costs
    (on a GPU) and its Hugging Face probe step (host_pool places the machine by it)."""
    result: dict = {"env": env_stamp(), **fields, "runs": []}
    if DEV == "cuda":
        result["launch"] = launch_costs()
    _probe_hf(result, "hf_probe")
    return result


def _probe_hf(result: dict, key: str, ctx: int = 512) -> None:
    """hf_host_probe into result[key]; its error, if any, into result[key + "_error"]."""
    try:
        result[key] = hf_host_probe(ctx)
        print(f"{key}: seen {result[key]['seen_ms']:.2f} ms, new {result[key]['new_ms']:.2f} ms",
              flush=True)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - record and go on
        result[f"{key}_error"] = f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    sys.exit(main())
