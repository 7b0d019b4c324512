"""Whole models as parallel plans on the GPUs of one node, measured beside the step engine's
prediction (the multi-GPU `gpuperf validate`, in a batch). Run from the repository root:

    python3 benchmarks/device/multigpu_validate.py OUT_DIR [--groups 2gpu,4gpu] [--budget-s 520]

Each run is a Hugging Face Llama with random bf16 weights and eager kernels, run by
gpuperf.measure.model_run under torchrun: DDP and FSDP2 training steps, DTensor (Hugging Face's
tp_plan) and Megatron-style tensor parallelism for prefill and decode (CUDA graphs for the
latter's decode), and each beside the same work on one GPU. Writes
OUT_DIR/validate_multigpu_<group>.json after every run: the environment, then per run the
config, scenario, implementation, every step's time (the slowest rank), peak memory per rank and
the prediction made before the run (the H200 profile as it was). A run that fails records its
error and the others go on; runs that would start after --budget-s are skipped and listed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuperf import api  # noqa: E402
from gpuperf.cli.validate_whole import summary  # noqa: E402
from gpuperf.fileio import json_safe, write_text  # noqa: E402
from gpuperf.measure.model_run import ModelRun, implementation, run_model  # noqa: E402
from gpuperf.perfmodel.accuracy import SCENARIO_KEYS  # noqa: E402
from gpuperf.workloads.config import from_hf_dict, hf_config  # noqa: E402
from gpuperf.workloads.scenario import Scenario  # noqa: E402

LLAMA_1B = {  # TinyLlama's shapes, as benchmarks/device/e2e_hf.py trains
    "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
    "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 4,
    "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "tie_word_embeddings": False,
}  # fmt: skip


def config(name: str) -> dict:
    if name == "llama-1.1b":
        return dict(LLAMA_1B)
    if name == "llama3-70b-8l":  # Llama-3-70B's widths, 8 layers
        return {**hf_config("llama3-70b")[0], "num_hidden_layers": 8}
    return hf_config(name)[0]


TINY = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 1024,
    "head_dim": 32,
}
E = {"impl": "eager"}
# (group, model, scenario keyword arguments)
PLAN = [
    # --- 2 GPUs: data parallel training, each beside one GPU ---------------------------------
    ("2gpu", "llama-1.1b", dict(E, mode="train", batch=4, seq=2048)),
    ("2gpu", "llama-1.1b", dict(E, mode="train", batch=4, seq=2048, dp=2)),
    ("2gpu", "llama-1.1b", dict(E, mode="train", batch=4, seq=2048, dp=2, zero=3)),
    ("2gpu", "llama3-8b", dict(E, mode="train", batch=1, seq=2048)),
    ("2gpu", "llama3-8b", dict(E, mode="train", batch=1, seq=2048, dp=2)),
    ("2gpu", "llama3-8b", dict(E, mode="train", batch=1, seq=2048, dp=2, zero=3)),
    # --- 2 GPUs: tensor parallel prefill and decode of an 8B model ---------------------------
    ("2gpu", "llama3-8b", dict(E, mode="prefill", batch=1, seq=2048)),
    ("2gpu", "llama3-8b", dict(E, mode="prefill", batch=1, seq=2048, tp=2, tp_impl="dtensor")),
    ("2gpu", "llama3-8b", dict(E, mode="prefill", batch=1, seq=2048, tp=2)),
    ("2gpu", "llama3-8b", dict(E, mode="decode", batch=1, ctx=2048)),
    ("2gpu", "llama3-8b", dict(E, mode="decode", batch=1, ctx=2048, tp=2, tp_impl="dtensor")),
    ("2gpu", "llama3-8b", dict(E, mode="decode", batch=1, ctx=2048, tp=2)),
    ("2gpu", "llama3-8b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True)),
    ("2gpu", "llama3-8b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True, tp=2)),
    ("2gpu", "llama3-70b-8l", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True)),
    ("2gpu", "llama3-70b-8l", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True, tp=2)),
    ("2gpu", "llama-1.1b", dict(E, mode="train", batch=4, seq=2048, tp=2, tp_impl="dtensor")),
    # Megatron-style TP training (a one-stage pipeline of pp_runner), beside DTensor's
    ("2gpu", "llama-1.1b", dict(E, mode="train", batch=4, seq=2048, tp=2)),
    ("2gpu", "llama3-8b", dict(E, mode="train", batch=1, seq=2048, tp=2)),
    ("2gpu", "llama3-8b", dict(E, mode="train", batch=1, seq=2048, tp=2, tp_impl="dtensor")),
    ("2gpu", "llama3-70b-8l", dict(E, mode="train", batch=1, seq=2048, tp=2)),
    # --- 4 GPUs: tensor parallelism, eager, beside this host's one GPU; then the pipeline ---
    ("4gpu", "llama3-8b", dict(E, mode="prefill", batch=1, seq=2048)),  # this host's one GPU
    ("4gpu", "llama3-8b", dict(E, mode="prefill", batch=1, seq=2048, tp=4, tp_impl="dtensor")),
    ("4gpu", "llama3-8b", dict(E, mode="prefill", batch=1, seq=2048, tp=4)),
    ("4gpu", "llama3-8b", dict(E, mode="decode", batch=1, ctx=2048, tp=4, tp_impl="dtensor")),
    ("4gpu", "llama3-8b", dict(E, mode="decode", batch=1, ctx=2048)),
    ("4gpu", "llama3-8b", dict(E, mode="decode", batch=1, ctx=2048, tp=4)),
    ("4gpu", "llama3-70b-8l", dict(E, mode="prefill", batch=1, seq=2048)),
    ("4gpu", "llama3-70b-8l", dict(E, mode="prefill", batch=1, seq=2048, tp=4)),
    ("4gpu", "llama3-70b-8l", dict(E, mode="prefill", batch=1, seq=2048, tp=4,
                                   tp_impl="dtensor")),
    ("4gpu", "llama3-70b-8l", dict(E, mode="train", batch=1, seq=2048, tp=4, tp_impl="dtensor")),
    ("4gpu", "llama3-70b-8l", dict(E, mode="decode", batch=1, ctx=2048, tp=4)),
    ("4gpu", "llama3-70b-8l", dict(E, mode="decode", batch=1, ctx=2048, tp=4, tp_impl="dtensor")),
    ("4gpu", "llama3-8b", dict(E, mode="train", batch=1, seq=2048, tp=4, tp_impl="dtensor")),
    ("4gpu", "llama3-8b", dict(E, mode="train", batch=1, seq=2048, tp=4)),
    ("4gpu", "llama3-70b-8l", dict(E, mode="train", batch=1, seq=2048, tp=4)),
    # --- a pipeline of 2 stages × tensor parallelism of 2 (1F1B, 8 micro-batches) ------------
    ("4gpu", "llama3-8b", dict(E, mode="prefill", batch=8, micro_batch=1, seq=2048, pp=2, tp=2)),
    ("4gpu", "llama3-8b", dict(E, mode="train", batch=8, micro_batch=1, seq=2048, pp=2, tp=2)),
    ("2gpu", "llama3-8b", dict(E, mode="train", batch=8, micro_batch=1, seq=2048, pp=2)),
    # --- CUDA-graph decode (last: a hang costs only its own timeout) -----------------------
    ("4gpu", "llama3-8b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True)),
    ("4gpu", "llama3-8b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True, tp=4)),
    ("4gpu", "llama3-70b-8l", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True)),
    ("4gpu", "llama3-70b-8l", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True, tp=4)),
    # --- a family the runs above never met (Qwen2: q/k/v biases, a 152k vocabulary, 28 heads
    # over 4 KV heads), on 2 GPUs beside one; every row held out --------------------------
    ("2gpu_qwen2", "qwen2-7b", dict(E, mode="train", batch=1, seq=2048)),
    ("2gpu_qwen2", "qwen2-7b", dict(E, mode="train", batch=1, seq=2048, dp=2)),
    ("2gpu_qwen2", "qwen2-7b", dict(E, mode="train", batch=1, seq=2048, dp=2, zero=3)),
    ("2gpu_qwen2", "qwen2-7b", dict(E, mode="prefill", batch=1, seq=2048)),
    ("2gpu_qwen2", "qwen2-7b", dict(E, mode="prefill", batch=1, seq=2048, tp=2)),
    ("2gpu_qwen2", "qwen2-7b", dict(E, mode="prefill", batch=1, seq=2048, tp=2,
                                    tp_impl="dtensor")),
    ("2gpu_qwen2", "qwen2-7b", dict(E, mode="train", batch=1, seq=2048, tp=2)),
    ("2gpu_qwen2", "qwen2-7b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True)),
    ("2gpu_qwen2", "qwen2-7b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True,
                                    tp=2)),
    # --- context parallelism as PyTorch runs it (context_parallel: ring attention, K and V
    # all-gathered), beside the same whole sequence on one GPU ------------------------------
    ("2gpu_cp", "llama3-8b", dict(E, mode="prefill", batch=1, seq=16384)),
    ("2gpu_cp", "llama3-8b", dict(E, mode="prefill", batch=1, seq=16384, cp=2)),
    ("2gpu_cp", "llama3-8b", dict(E, mode="prefill", batch=1, seq=32768)),
    ("2gpu_cp", "llama3-8b", dict(E, mode="prefill", batch=1, seq=32768, cp=2)),
    ("2gpu_cp", "llama-1.1b", dict(E, mode="train", batch=1, seq=16384)),
    ("2gpu_cp", "llama-1.1b", dict(E, mode="train", batch=1, seq=16384, cp=2)),
    ("2gpu_cp", "llama3-8b", dict(E, mode="train", batch=1, seq=8192)),
    ("2gpu_cp", "llama3-8b", dict(E, mode="train", batch=1, seq=8192, cp=2)),
    # --- context parallelism again, held out: shapes and a family the model was not built on
    ("2gpu_cp_heldout", "qwen2-7b", dict(E, mode="train", batch=1, seq=8192)),
    ("2gpu_cp_heldout", "qwen2-7b", dict(E, mode="train", batch=1, seq=8192, cp=2)),
    ("2gpu_cp_heldout", "qwen2-7b", dict(E, mode="prefill", batch=1, seq=32768)),
    ("2gpu_cp_heldout", "qwen2-7b", dict(E, mode="prefill", batch=1, seq=32768, cp=2)),
    ("2gpu_cp_heldout", "llama-1.1b", dict(E, mode="train", batch=1, seq=32768)),
    ("2gpu_cp_heldout", "llama-1.1b", dict(E, mode="train", batch=1, seq=32768, cp=2)),
    ("2gpu_cp_heldout", "llama3-8b", dict(E, mode="prefill", batch=2, seq=16384)),
    ("2gpu_cp_heldout", "llama3-8b", dict(E, mode="prefill", batch=2, seq=16384, cp=2)),
    ("2gpu_cp_heldout", "llama3-8b", dict(E, mode="train", batch=2, seq=4096)),
    ("2gpu_cp_heldout", "llama3-8b", dict(E, mode="train", batch=2, seq=4096, cp=2)),
    # --- a family none of the plans above met (Mistral-7B: 32k vocabulary, 8 KV heads, a
    # 4,096-token window the 2,048-token runs stay inside), every row held out -------------
    ("2gpu_mistral", "mistral-7b", dict(E, mode="train", batch=1, seq=2048)),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="train", batch=1, seq=2048, dp=2)),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="train", batch=1, seq=2048, dp=2, zero=3)),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="prefill", batch=1, seq=2048)),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="prefill", batch=1, seq=2048, tp=2)),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="prefill", batch=1, seq=2048, tp=2,
                                        tp_impl="dtensor")),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="decode", batch=1, ctx=2048)),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="decode", batch=1, ctx=2048, tp=2)),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="train", batch=1, seq=2048, tp=2)),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True)),
    ("2gpu_mistral", "mistral-7b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True,
                                        tp=2)),
    # --- one GPU, CUDA-graph decode again: gpuperf validate's worker freed the StaticCache as
    # the capture returned until 5e7cda2, so the 1-GPU graph rows above hold the weights' peak
    # alone; these measure the same runs, and two larger ones, with the cache kept -----------
    ("1gpu_graphs", "llama3-8b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True)),
    ("1gpu_graphs", "qwen2-7b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True)),
    ("1gpu_graphs", "mistral-7b", dict(E, mode="decode", batch=8, ctx=2048, cuda_graphs=True)),
    ("1gpu_graphs", "llama3-70b-8l", dict(E, mode="decode", batch=8, ctx=2048,
                                          cuda_graphs=True)),
    ("1gpu_graphs", "llama3-8b", dict(E, mode="decode", batch=32, ctx=8192, cuda_graphs=True)),
    ("1gpu_graphs", "qwen2-7b", dict(E, mode="decode", batch=64, ctx=4096, cuda_graphs=True)),
    # --- data parallelism of 4 ---------------------------------------------------------------
    ("4gpu", "llama-1.1b", dict(E, mode="train", batch=4, seq=2048, dp=4)),
    ("4gpu", "llama-1.1b", dict(E, mode="train", batch=4, seq=2048, dp=4, zero=3)),
    ("4gpu", "llama3-8b", dict(E, mode="train", batch=1, seq=2048, dp=4)),
    ("4gpu", "llama3-8b", dict(E, mode="train", batch=1, seq=2048, dp=4, zero=3)),
]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--groups", default="2gpu,4gpu")
    p.add_argument("--budget-s", type=float, default=520.0)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--match", default="", help="run only the plans whose label this regex finds")
    p.add_argument("--profile", action="store_true", help="one profiled step of each plan")
    p.add_argument("--device", default="cuda", help="cpu: a gloo smoke test (tiny models)")
    a = p.parse_args()
    import signal

    import torch

    def stop(signum, frame):  # noqa: ANN001 - `timeout` sends SIGTERM: end the workers too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)

    from gpuperf.hardware.detect import detect_gpu

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    spec = detect_gpu(0) if a.device == "cuda" else None
    have = torch.cuda.device_count() if a.device == "cuda" else 4
    a.out_dir.mkdir(parents=True, exist_ok=True)
    host = {}
    if a.device == "cuda":  # this host's CPU, as `gpuperf calibrate` measures it (one process)
        from gpuperf.measure.calibration import measure_attn_plan, measure_host_dispatch

        host = {"host_dispatch_bare_s": measure_host_dispatch("cuda:0"),
                "host_attn_plan_s": measure_attn_plan("cuda:0")}  # fmt: skip
        print(f"host: {host}", flush=True)
    start = time.monotonic()
    for group in a.groups.split(","):
        path = a.out_dir / f"validate_multigpu_{group}.json"
        data: dict = {"runs": [], "skipped": [], "host": host}
        for g, model, kw in PLAN:
            if g != group:
                continue
            if a.device == "cpu":  # the smoke test: tiny widths, short sequences, no graphs
                if kw.get("cuda_graphs"):
                    continue
                kw = {**kw, **{k: 64 for k in ("seq", "ctx") if k in kw}}
            sc = Scenario(sequence_parallel=False, **kw)
            label = f"{model} {sc.label()} {sc.mode}" + (" graphs" if sc.cuda_graphs else "")
            if a.match and not re.search(a.match, label):
                continue
            if time.monotonic() - start > a.budget_s or sc.gpus > have:
                data["skipped"].append(label)
                print(f"skip {label}", flush=True)
                continue
            cfg_dict = config(model) if a.device == "cuda" else {**config(model), **TINY}
            cfg = from_hf_dict(cfg_dict, name=model)
            pred = None
            if spec is not None:
                pred = api.predict(
                    cfg, gpu=spec, **api.for_mode({k: getattr(sc, k) for k in SCENARIO_KEYS})
                )
            t0 = time.monotonic()
            try:
                profile = sc.gpus > 1 and a.profile
                result = run_model(ModelRun(cfg_dict, sc, a.device, iters=a.iters,
                                            timeout_s=120.0 if sc.cuda_graphs else 240.0,
                                            profile=profile))  # fmt: skip
                run = summary(model, sc, implementation(sc), result, pred)
                if "profile" in result:
                    run["profile"] = result["profile"]
                data.setdefault("env", result.get("env", {}))
                shown = f"{run['measured_ms']:9.2f} ms (host {run.get('host_ms', 0):7.2f})"
                if pred is not None:
                    shown += (f"  predicted {pred.total_ms:9.2f} ms ({run['error_pct']:+.1f}%, "
                              f"host {pred.extra.get('host_ms', 0):7.2f})")  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - record and go on
                run = {"model": model, "plan": sc.label(), "scenario": kw,
                       "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc()[-1500:]}  # fmt: skip
                shown = run["error"][:300]
            run["wall_s"] = round(time.monotonic() - t0, 1)
            data["runs"].append(run)
            write_text(path, json.dumps(json_safe(data), indent=1))
            print(f"{label:55s} {shown}  [{run['wall_s']} s]", flush=True)
        write_text(path, json.dumps(json_safe(data), indent=1))
    print(f"total {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
