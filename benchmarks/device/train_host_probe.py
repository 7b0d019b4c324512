"""What the host pays per kernel in each phase of a Hugging Face training step, with and without
gradient checkpointing.

A training step's forward runs the modeling code's Python and records autograd's graph (a node
and its saved tensors per op); its backward is autograd's C++ engine; with
gradient_checkpointing_enable() each decoder layer's forward runs again inside the backward,
through the saved-tensor hooks of torch.utils.checkpoint. On tiny shapes (the GPU idles between
kernels) each phase's host clock over the kernels it launches is its host cost per kernel. A
profiled Gemma-3-1B step (e2e_trainprof.json) was host-bound under checkpointing (284 ms of
kernels in 371 ms) where the model, charging every kernel the inference host cost, said 278 ms.

    python3 benchmarks/device/train_host_probe.py OUT_DIR [--families a,b] [--iters N] [--sac]

Writes OUT_DIR/train_host.json: per family (the e2e_hf.py config, made tiny: width 256, at
two depths, 2 and 6 layers: their difference is four layers' cost without the call's own), per
phase (inf: the forward under no_grad; fwd: the forward with autograd; bwd; opt: AdamW's step
and zero_grad; ckpt_fwd and ckpt_bwd under checkpointing; with --sac, sac_fwd and sac_bwd
under torchtitan's per-op checkpointing instead, into train_host_sac.json) the host time of one
call from an idle GPU (median of N, samples kept) and the GPU kernels torch.profiler saw
(kernels, memsets and copies apart, the most frequent names; on these tiny shapes it missed
about half of them, 53 of the 119 gpuperf predicts for a 2-layer Llama's forward, so
benchmarks/train_host_fit.py divides by the kernels gpuperf predicts instead); the machine's
launch costs and its Hugging Face probe step (e2e_hf.py), which place it in the host pool.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import e2e_hf  # noqa: E402  (this folder)

# Each family at two depths: the difference is what one more layer costs, without what the
# model call costs once (its masks, rotary cache, loss and output handling).
FAMILIES = tuple(f"{name}@{layers}" for name in ("llama3.2-1b", "gemma-3-1b", "gpt2-xl",
                                                 "qwen3-8b", "pythia-6.9b", "phi-3-mini")
                 for layers in (2, 6))  # fmt: skip
BATCH, SEQ = 1, 64


def count_kernels(prof, torch) -> dict:  # noqa: ANN001
    """GPU activity of one profiled call: kernels, memsets and copies apart (annotations such
    as Optimizer.step#AdamW.step are not kernels), and the most frequent kernel names."""
    kernels, memsets, copies, names = 0, 0, 0, {}
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA or "#" in e.key:
            continue
        if e.key.startswith("Memset"):
            memsets += e.count
        elif e.key.startswith("Memcpy"):
            copies += e.count
        else:
            kernels += e.count
            names[e.key[:120]] = names.get(e.key[:120], 0) + e.count
    top = sorted(names.items(), key=lambda kv: -kv[1])[:25]
    return {"kernels": kernels, "memsets": memsets, "copies": copies,
            "top": [{"name": n, "count": c} for n, c in top]}  # fmt: skip


def probe_family(entry: str, iters: int, variants: tuple[str, ...] = ("plain", "ckpt")) -> dict:
    """`entry`: a model of e2e_hf.CONFIGS and its depth, "name@layers". variants: plain, ckpt
    (gradient_checkpointing_enable), sac (torchtitan's per-op policy on each layer,
    gpuperf.measure.layer_wrap; run last: it wraps the layers for good)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sync = e2e_hf.sync
    # CPU beside CUDA, as e2e_hf.kernel_profile records (the counts still fall short: docstring)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if e2e_hf.DEV == "cuda" else [])
    name, _, at = entry.partition("@")
    layers = int(at or 4)
    cfg = e2e_hf.tiny_layers(name, layers)
    model = e2e_hf.build_model(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, model.config.vocab_size, (BATCH, SEQ), device=e2e_hf.DEV)
    state: dict = {}

    def inf() -> None:
        with torch.no_grad():
            model(input_ids=ids, labels=ids, use_cache=False)

    def fwd() -> None:
        state["loss"] = model(input_ids=ids, labels=ids, use_cache=False).loss

    def bwd() -> None:
        state.pop("loss").backward()

    def step_opt() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    calls = {"inf": inf, "fwd": fwd, "bwd": bwd, "opt": step_opt}
    order = ("inf", "fwd", "bwd", "opt")
    out: dict = {
        "model": name,
        "layers": layers,
        "config": cfg,
        "batch": BATCH,
        "seq": SEQ,
        "phases": {},
    }
    for variant in variants:
        ckpt = variant != "plain"
        if variant == "ckpt":
            model.gradient_checkpointing_enable()
        elif variant == "sac":
            from gpuperf.measure.layer_wrap import wrap_layers

            model.gradient_checkpointing_disable()
            wrap_layers(model, "op")
        if ckpt:
            order = ("fwd", "bwd", "opt")
        samples: dict[str, list[float]] = {p: [] for p in order}
        steps: list[float] = []
        for i in range(iters + 3):  # three warm-up steps
            t_step = 0.0
            for phase in order:
                sync()
                t0 = time.perf_counter()
                calls[phase]()
                dt = (time.perf_counter() - t0) * 1e3
                t_step += dt
                if i >= 3:
                    samples[phase].append(dt)
            if i >= 3:
                steps.append(t_step)
        for phase in ("fwd", "bwd") if ckpt else order:  # AdamW's step is the same either way
            key = f"{variant}_{phase}" if ckpt else phase
            sync()
            if phase == "bwd":  # the loss to differentiate, made outside the profile
                fwd()
            elif phase == "opt":  # gradients to step on
                fwd()
                bwd()
            sync()
            with profile(activities=activities) as prof:
                calls[phase]()
                sync()
            if phase == "fwd":  # free the graph the profiled forward recorded
                state.pop("loss").backward()
                opt.zero_grad(set_to_none=True)
            out["phases"][key] = {
                "host_ms": statistics.median(samples[phase]),
                "samples_ms": samples[phase],
                **count_kernels(prof, torch),
            }
        out[f"{variant}_step_host_ms" if ckpt else "step_host_ms"] = statistics.median(steps)
    model.gradient_checkpointing_disable()
    state.clear()  # the model, its optimizer and the closures go with this frame
    if e2e_hf.DEV == "cuda":
        torch.cuda.empty_cache()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="directory for train_host.json")
    ap.add_argument("--families", default=",".join(FAMILIES), help="name@layers,...")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test")
    ap.add_argument("--sac", action="store_true",
                    help="plain and per-op checkpointed steps (train_host_sac.json)")  # fmt: skip
    args = ap.parse_args()
    e2e_hf.DEV = args.device
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ("train_host_sac.json" if args.sac else "train_host.json")
    variants = ("plain", "sac") if args.sac else ("plain", "ckpt")
    result = e2e_hf.probe_file(batch=BATCH, seq=SEQ)
    for entry in args.families.split(","):
        t0 = time.time()
        try:
            run = probe_family(entry, args.iters, variants)
        except Exception as exc:  # noqa: BLE001 - record and go on
            run = {"model": entry, "error": f"{type(exc).__name__}: {exc}",
                   "traceback": traceback.format_exc()[-2000:]}  # fmt: skip
        run["wall_s"] = round(time.time() - t0, 1)
        result["runs"].append(run)
        path.write_text(json.dumps(result, indent=1))
        ph = run.get("phases", {})
        print(entry, {k: (round(v["host_ms"], 2), v["kernels"]) for k, v in ph.items()},
              run.get("error", ""), flush=True)  # fmt: skip
    e2e_hf._probe_hf(result, "hf_probe_end")
    path.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
