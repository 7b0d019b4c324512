"""One rank of a whole-model run under torchrun: a Hugging Face causal LM (random weights; a
Llama-family one where modules are split by name, gpuperf.measure.hf_causal) as an
implementation people run, timed step by step. Started by gpuperf.measure.model_run.

    python -m torch.distributed.run --nproc-per-node N -m gpuperf.measure.model_worker \\
        --spec spec.json --out result.json

Implementations (spec["impl"]): single (one GPU), ddp (DistributedDataParallel, 25 MiB buckets),
fsdp (FSDP2: fully_shard on every decoder layer and on the root; the model in its dtype, so
gathers and reduce-scatters run in it), dtensor (Hugging Face's tp_plan, applied with
apply_tensor_parallelism: DTensor weights), megatron (plain-PyTorch tensor parallelism,
gpuperf.measure.tp_megatron), cp (context parallelism as PyTorch runs it: the
`context_parallel` context of torch.distributed.tensor.experimental shards the tokens with its
head-tail load balance and turns SDPA into ring attention, its K and V rotated by one
all-gather; in training the model is wrapped in DDP, whose all-reduce joins the CP ranks'
gradients). NCCL on GPUs, gloo on CPUs.

Each decoder layer may be checkpointed (spec["recompute"]: full, or torchtitan's per-op policy,
op) and compiled (spec["compile"]) in place before any wrapping, as torchtitan does its blocks
(gpuperf.measure.layer_wrap).

Modes: prefill (no_grad, one forward, logits of the last token), decode (one-token steps on a
DynamicCache holding ctx tokens, growing by one per step; with graphs, a StaticCache captured in
a CUDA graph), train (forward with the Hugging Face loss, backward, AdamW's default foreach
step, zero_grad). Each iteration is timed on every rank (CUDA events; a barrier first); the step
is the slowest rank's time. Rank 0 writes the result after every iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def _setup() -> tuple[torch.device, int, int]:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available() and os.environ.get("GPUPERF_DEVICE", "cuda") == "cuda"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    # A collective that never completes (a rank that died) ends the run instead of hanging it.
    timeout = timedelta(seconds=float(os.environ.get("GPUPERF_COLL_TIMEOUT_S", "180")))
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None,
                            timeout=timeout)  # fmt: skip
    return device, dist.get_rank(), dist.get_world_size()


def _config(d: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(**{k: v for k, v in d.items() if not k.startswith("_")})
    cfg._attn_implementation = "sdpa"
    return cfg


def _vocab(spec: dict[str, Any]) -> int:
    """The model's vocabulary, as transformers builds it (a config.json may leave it to the
    family's default, as Gemma-3's text config does)."""
    return int(_config(spec["config"]).vocab_size)


def _dtype(name: str) -> torch.dtype:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def build(spec: dict[str, Any], device: torch.device, rank: int, world: int) -> Any:
    """The model as spec["impl"] runs it, on this rank."""
    from gpuperf.measure.hf_causal import causal_lm

    cfg, dtype, impl = _config(spec["config"]), _dtype(spec["dtype"]), spec["impl"]
    torch.manual_seed(0)  # the same weights on every rank where they are replicated
    if impl == "pipeline":
        from gpuperf.measure.pp_runner import Layout, Pipeline, Stage

        stage = Stage(cfg, Layout(spec["pp"], spec["tp"]), device, dtype)
        micro = spec["batch"] // spec["micro_batch"]
        return Pipeline(stage, micro, spec["batch"], spec["seq"], cfg.hidden_size, dtype, device)
    if impl == "megatron":
        from gpuperf.measure import tp_megatron

        return tp_megatron.build(cfg, world, rank, device, dtype)
    if impl == "dtensor":
        from torch.distributed.device_mesh import init_device_mesh
        from transformers.distributed.tensor_parallel import apply_tensor_parallelism

        with torch.device("meta"):
            model = causal_lm(cfg).to(dtype)
        mesh = init_device_mesh(device.type, (world,))
        model = apply_tensor_parallelism(model, mesh)
        model.to_empty(device=device)
        _init_local(model)
        model.model.rotary_emb = type(model.model.rotary_emb)(cfg).to(device)
        model._tp_size, model._device_mesh = world, mesh
        return model
    with torch.device(device):
        model = causal_lm(cfg).to(dtype)
    if spec.get("recompute", "none") != "none" or spec.get("compile"):
        from gpuperf.measure.layer_wrap import wrap_layers

        wrap_layers(model, spec.get("recompute", "none"), bool(spec.get("compile")))
    if impl == "ddp" or (impl == "cp" and spec["mode"] == "train"):
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    if impl == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (world,))
        from gpuperf.measure.hf_causal import decoder_layers

        for layer in decoder_layers(model):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    return model


@torch.no_grad()
def _init_local(model: Any) -> None:
    from torch.distributed.tensor import DTensor

    for name, p in model.named_parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        if name.endswith("norm.weight"):
            local.fill_(1.0)
        else:
            local.normal_(0.0, 0.02)


def _inner(model: Any) -> Any:
    return getattr(model, "module", model)


def step_fn(model: Any, spec: dict[str, Any], device: torch.device) -> Any:
    """A function that runs one step of spec["mode"] (module docstring)."""
    vocab, b = _vocab(spec), spec["batch"]
    mode = spec["mode"]
    gen = torch.Generator(device="cpu").manual_seed(1)
    if spec["impl"] == "pipeline":
        return _pipeline_step(model, spec, device, gen)
    if spec["impl"] == "cp":
        return _cp_step(model, spec, device, gen)
    if mode == "prefill":
        _inner(model).eval()
        ids = torch.randint(0, vocab, (b, spec["seq"]), generator=gen).to(device)

        def prefill() -> None:
            with torch.no_grad():
                model(input_ids=ids, use_cache=False, logits_to_keep=1)

        return prefill
    if mode == "decode":
        _inner(model).eval()
        return _decode(model, spec, device, gen)
    model.train()
    # foreach as on GPUs (the CPU's default is the per-tensor loop); states in the params' dtype
    opt = torch.optim.AdamW(_param_groups(model), lr=1e-5, foreach=True)
    ids = torch.randint(0, vocab, (b, spec["seq"]), generator=gen).to(device)

    def train() -> None:
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return train


def _param_groups(model: Any) -> list[dict[str, Any]]:
    """The parameters in groups that AdamW's foreach kernels can take whole: DTensors apart from
    plain tensors (HF's tp_plan leaves the norms plain, and foreach refuses the mix)."""
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if p.requires_grad]
    split = [[p for p in params if isinstance(p, DTensor)],
             [p for p in params if not isinstance(p, DTensor)]]  # fmt: skip
    return [{"params": group} for group in split if group]


def _cp_step(model: Any, spec: dict[str, Any], device: torch.device, gen: Any) -> Any:
    """A context-parallel step: each call copies the whole sequence's tokens into buffers that
    `context_parallel` shards in place (its load balancer gives each rank a head and a tail
    chunk), then runs the forward (and backward) inside it. The positions stay the local ones
    (0 .. seq/cp - 1): passing the balanced positions would make Hugging Face see packed
    sequences and build a mask; the kernels and their shapes are the same either way."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    vocab, b, mode = _vocab(spec), spec["batch"], spec["mode"]
    ids = torch.randint(0, vocab, (b, spec["seq"]), generator=gen).to(device)
    if mode == "prefill":
        _inner(model).eval()
    else:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)

    def step() -> None:
        tokens, labels = ids.clone(), ids.clone()
        with context_parallel(mesh, buffers=[tokens, labels], buffer_seq_dims=[1, 1],
                              no_restore_buffers={tokens, labels}):  # fmt: skip
            if mode == "prefill":
                with torch.no_grad():
                    model(input_ids=tokens, use_cache=False, logits_to_keep=1)
                return
            model(input_ids=tokens, labels=labels, use_cache=False).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _pipeline_step(pipe: Any, spec: dict[str, Any], device: torch.device, gen: Any) -> Any:
    """A pipeline's step: every micro-batch through the stages (1F1B and AdamW in training)."""
    vocab, mb = _vocab(spec), spec["micro_batch"]
    ids = [torch.randint(0, vocab, (mb, spec["seq"]), generator=gen).to(device)
           for _ in range(pipe.m)]  # fmt: skip
    if spec["mode"] == "prefill":
        pipe.stage.eval()
        return lambda: pipe.infer(ids)
    pipe.stage.train()
    opt = torch.optim.AdamW(pipe.stage.parameters(), lr=1e-5, foreach=True)

    def train() -> None:
        pipe.train(ids)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return train


def _decode(model: Any, spec: dict[str, Any], device: torch.device, gen: Any) -> Any:
    from transformers import DynamicCache, StaticCache

    inner = _inner(model)
    vocab, b, ctx = _vocab(spec), spec["batch"], spec["ctx"]
    ids = torch.randint(0, vocab, (b, ctx), generator=gen).to(device)
    tok = torch.randint(0, vocab, (b, 1), generator=gen).to(device)
    if not spec.get("graphs"):
        cache = DynamicCache(config=inner.config)
        with torch.no_grad():
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)

        def step() -> None:
            with torch.no_grad():
                model(input_ids=tok, past_key_values=cache, use_cache=True)

        return step
    steps = spec["iters"] + spec["warmup"] + 8
    cache = StaticCache(config=inner.config, max_cache_len=ctx + steps)
    pos = torch.tensor([ctx], device=device)
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)

    def fwd() -> None:
        model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)

    rank = dist.get_rank()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    _stage(rank, "graph warm-up on a side stream")
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(2):  # allocations, handles and NCCL's own warm-up, outside the capture
            fwd()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    dist.barrier()
    _stage(rank, "graph capture")
    graph = torch.cuda.CUDAGraph()
    # thread_local: NCCL's watchdog thread keeps querying its events during the capture, which
    # the default (global) mode forbids.
    with torch.no_grad(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
        fwd()
    _stage(rank, "graph captured")

    def replay(keep: tuple = (cache, tok, pos)) -> None:  # the graph's buffers stay allocated
        graph.replay()

    return replay


def _time_once(fn: Any, device: torch.device) -> tuple[float, float]:
    """Milliseconds of one call on this rank, started together with the other ranks: the step
    (CUDA events) and the host's part, until the call returned with its work queued (a step that
    is host-bound has the two about equal)."""
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        fn()
        host = (time.perf_counter() - t0) * 1e3
        b.record()
        b.synchronize()
        return a.elapsed_time(b), host
    t0 = time.perf_counter()
    fn()
    ms = (time.perf_counter() - t0) * 1e3
    return ms, ms


def _stage(rank: int, what: str) -> None:
    """A line in the workers' log: where a rank was when a run hangs (the launcher shows it)."""
    print(f"[gpuperf rank {rank}] {what}", file=sys.stderr, flush=True)


def check_error(
    spec: dict[str, Any], model: Any, device: torch.device, rank: int, world: int
) -> float:
    """Relative error of the parallel model's last-token logits against the whole model with the
    same weights (megatron-style TP; both from the same seed). NaN where not implemented."""
    if spec["impl"] != "megatron" or spec["mode"] == "train":
        return float("nan")
    from gpuperf.measure import tp_megatron
    from gpuperf.measure.hf_causal import causal_lm

    cfg = _config(spec["config"])
    torch.manual_seed(0)
    with torch.device(device):
        full = causal_lm(cfg).to(_dtype(spec["dtype"])).eval()
    with torch.no_grad():  # biases start at zero: give them values, so their slices are checked
        gen = torch.Generator(device=device).manual_seed(5)
        for name, p in full.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.02, generator=gen)
    tp_megatron.shard_from(model, full, world, rank)
    ids = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(3))
    ids = ids.to(device)
    with torch.no_grad():
        want = full(input_ids=ids, use_cache=False).logits.float()
        got = model(input_ids=ids, use_cache=False).logits.float()
    del full
    return float((got - want).norm() / want.norm())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    spec = json.loads(Path(args.spec).read_text())
    device, rank, world = _setup()
    out: dict[str, Any] = {"spec": spec, "world": world, "samples_ms": []}
    path = Path(args.out)
    try:
        from gpuperf.measure.env import environment

        out["env"] = environment(device.type) if rank == 0 else {}
        if rank == 0:
            import transformers

            out["env"]["transformers"] = transformers.__version__
        _stage(rank, "build")
        model = build(spec, device, rank, world)
        if spec.get("check"):
            _stage(rank, "check")
            out["check_rel_err"] = check_error(spec, model, device, rank, world)
        _stage(rank, "step setup" + (" and graph capture" if spec.get("graphs") else ""))
        fn = step_fn(model, spec, device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _stage(rank, "warm-up")
        for _ in range(spec["warmup"]):
            _time_once(fn, device)
        _stage(rank, "timed steps")
        for _ in range(spec["iters"]):
            mine = _time_once(fn, device)
            every = [None] * world
            dist.all_gather_object(every, mine)
            out["samples_ms"].append(max(ms for ms, _ in every))
            out["rank_samples_ms"] = out.get("rank_samples_ms", []) + [[ms for ms, _ in every]]
            out["rank_host_ms"] = out.get("rank_host_ms", []) + [[h for _, h in every]]
            if rank == 0:
                out["measured_ms"] = statistics.median(out["samples_ms"])
                _write(path, out)
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
        peaks = [None] * world
        dist.all_gather_object(peaks, peak)
        out["peak_memory_bytes"] = peaks
        if spec.get("profile"):  # every rank runs the step (its collectives need them all)
            dist.barrier()
            prof = _profile(fn, device)
            if rank == 0:
                out["profile"] = prof
    except Exception as exc:  # noqa: BLE001 - recorded for the launcher, then re-raised
        out["error"] = f"rank {rank}: {type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-3000:]
        _write(path if rank == 0 else path.with_suffix(f".rank{rank}.json"), out)
        raise
    if rank == 0:
        _write(path, out)
    _stage(rank, "done")
    dist.barrier()
    # Destroying a communicator whose collectives a CUDA graph captured can hang
    # (pytorch/pytorch#115388): those runs leave it.
    from gpuperf.measure.launch import worker_exit

    worker_exit(destroy_group=not (spec.get("graphs") and world > 1))


def _profile(fn: Any, device: torch.device, top: int = 40) -> dict[str, Any]:
    """One more step under torch.profiler: GPU time and count of the busiest kernels, and the host
    ops with the most self CPU time (rank 0's view; other ranks run the step alongside so the
    collectives complete)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        with profile(activities=acts) as prof:
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", 0.0) or getattr(e, "cuda_time_total", 0.0)
            if e.device_type == torch.autograd.DeviceType.CUDA and t > 0:
                rows.append({"name": e.key[:160], "count": e.count, "gpu_us": t})
        rows.sort(key=lambda r: -r["gpu_us"])
        host = [
            {"name": e.key[:160], "count": e.count, "self_cpu_us": e.self_cpu_time_total}
            for e in prof.key_averages()
            if e.device_type == torch.autograd.DeviceType.CPU
        ]
        host.sort(key=lambda r: -r["self_cpu_us"])
        return {
            "kernels": rows[:top],
            "gpu_us_total": sum(r["gpu_us"] for r in rows),
            "host_ops": host[:top],
            "self_cpu_us_total": sum(r["self_cpu_us"] for r in host),
        }
    except Exception as exc:  # noqa: BLE001 - a profile is extra; the timing stands
        return {"error": f"{type(exc).__name__}: {exc}"}


def _write(path: Path, data: dict[str, Any]) -> None:
    from gpuperf.fileio import write_text

    write_text(path, json.dumps(data, default=str))


if __name__ == "__main__":
    raise SystemExit(main())
