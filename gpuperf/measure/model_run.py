"""Run a whole model as a parallel plan under torchrun (gpuperf.measure.model_worker) and read the
measured step back: what `gpuperf validate MODEL --nproc N` and the device scripts call.

A Scenario says what to run; `implementation(sc)` names the code that runs it (Hugging Face
eager kernels in every case): single, ddp, fsdp (ZeRO-3 as FSDP2), dtensor (HF's tp_plan) or
megatron (plain-PyTorch TP) or cp (PyTorch's context parallelism). What none of them runs is
refused with the reason.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuperf.errors import EnvironmentUnavailable, GpuperfError, InputError
from gpuperf.fileio import write_text
from gpuperf.measure.launch import WorkersTimedOut, child_env, last_error, run_workers


class ModelRunFailed(GpuperfError):
    """torchrun or a rank exited with an error (exit 1); the message carries the last error line."""


def implementation(sc: Any) -> str:
    """The code that runs scenario `sc` (module docstring); InputError when none does."""
    why = _unsupported(sc)
    if why:
        raise InputError(f"whole-model runs do not cover {why}")
    if sc.pp > 1 or (sc.mode == "train" and sc.tp > 1 and sc.tp_impl == "megatron"):
        return "pipeline"  # Megatron-style TP training: pp_runner's one-stage pipeline
    if sc.cp > 1:
        return "cp"
    if sc.tp > 1:
        return sc.tp_impl
    if sc.dp > 1:
        return "fsdp" if sc.zero == 3 else "ddp"
    return "single"


def _unsupported(sc: Any) -> str:
    checks = [
        (sc.impl == "fused", "--impl fused (they run Hugging Face's modules, eager or "
         "compiled: --impl eager or compile)"),
        (sc.dtype not in ("bf16", "fp16", "fp32"), f"--dtype {sc.dtype} (torchao's float8 "
         "training is measured by benchmarks/device/compile_train_probe.py)"),
        (sc.recompute == "selective", "--recompute selective (Megatron's; --recompute full "
         "or op)"),
        ((sc.recompute != "none" or sc.impl == "compile") and (sc.pp > 1 or sc.cp > 1 or sc.tp > 1),
         "checkpointed or compiled layers in pipeline, context- or tensor-parallel runs"),
        (sc.mode == "generate", "--mode generate (time prefill and decode steps apart)"),
        (sc.ep > 1, "expert parallelism"),
        (sc.cp > 1 and sc.gpus != sc.cp, "context parallelism beside other parallelism"),
        (sc.cp > 1 and sc.zero != 0, "context parallelism with ZeRO (its runner joins the "
         "gradients with DDP: --zero 0)"),
        (sc.pp > 1 and (sc.dp > 1 or sc.tp_impl != "megatron" or sc.mode == "decode"),
         "pipelines with data parallelism, DTensor or decode (megatron-style TP inside stages, "
         "prefill and train)"),
        (sc.pp > 1 and sc.schedule != "1f1b", "the interleaved schedule"),
        (sc.zero in (1, 2), "ZeRO-1/2 (use --zero 0 for DDP or --zero 3 for FSDP2)"),
        (sc.tp > 1 and sc.dp > 1, "tensor and data parallelism together"),
        (sc.tp > 1 and sc.sequence_parallel, "sequence parallelism (--no-sequence-parallel)"),
        (sc.mode != "train" and sc.dp > 1, "data parallelism outside training"),
        (sc.cuda_graphs and sc.mode != "decode", "CUDA graphs outside decode"),
        (sc.cuda_graphs and sc.tp > 1 and sc.tp_impl == "dtensor", "CUDA graphs with DTensor"),
        (sc.microbatches > 1 and sc.pp == 1, "several micro-batches outside a pipeline"),
        (sc.attn != "flash", "--attn math (Hugging Face runs SDPA)"),
    ]  # fmt: skip
    return next((why for bad, why in checks if bad), "")


@dataclass(frozen=True, slots=True)
class ModelRun:
    """One whole-model measurement: the HF config dict, the scenario, how long to run."""

    config: dict[str, Any]
    scenario: Any
    device: str = "cuda"
    iters: int = 10
    warmup: int = 3
    check: bool = False
    timeout_s: float | None = 900.0
    profile: bool = False

    @property
    def nproc(self) -> int:
        return self.scenario.gpus

    def spec(self) -> dict[str, Any]:
        sc = self.scenario
        return {
            "config": self.config,
            "impl": implementation(sc),
            "mode": sc.mode,
            "batch": sc.batch,
            "micro_batch": sc.micro_batch,
            "pp": sc.pp,
            "tp": sc.tp,
            "seq": sc.seq,
            "ctx": sc.ctx,
            "dtype": sc.dtype,
            "graphs": sc.cuda_graphs,
            "recompute": sc.recompute,
            "compile": sc.impl == "compile",
            "iters": self.iters,
            "warmup": self.warmup,
            "check": self.check,
            "profile": self.profile,
        }


def check_devices(run: ModelRun) -> None:
    """EnvironmentUnavailable when torch, transformers or the GPUs are missing; InputError for a
    model the run cannot build (gpuperf.measure.hf_causal)."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as exc:
        raise EnvironmentUnavailable(
            f"whole-model runs need torch and transformers ({exc.name} is missing)"
        ) from None
    if run.device == "cuda":
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < run.nproc:
            raise EnvironmentUnavailable(
                f"{run.nproc} GPUs needed, {have} present"
                + ("; use --device cpu" if not have else "")  # fmt: skip
            )
    else:
        from gpuperf.measure.env import check_cpu_ranks

        check_cpu_ranks(run.nproc)
    impl = implementation(run.scenario)
    if impl == "cp":
        if run.device != "cuda":
            raise EnvironmentUnavailable(
                "PyTorch's context parallelism runs on CUDA GPUs only (its ring attention wraps "
                "the CUDA SDPA kernels)"
            )
        from gpuperf.step.plan import check_ring_window
        from gpuperf.workloads.hf_config import from_hf_dict

        name = str(run.config.get("model_type", "the model"))
        check_ring_window(from_hf_dict(run.config, name=name), run.scenario)
    from gpuperf.measure import hf_causal

    kind = run.config.get("model_type")
    if impl in hf_causal.WHOLE:
        why = hf_causal.whole_refusal(run.config)
        if why:
            raise InputError(why)
    elif kind not in (*hf_causal.FAMILIES, None):
        raise InputError(f"the {impl} run splits Llama-family modules by name "
                         f"({', '.join(hf_causal.FAMILIES)}), not {kind!r}'s: run it whole "
                         "(one GPU, --dp, or --dp --zero 3)")  # fmt: skip


def stages(log: Path) -> str:
    """Where each rank last was, from the workers' log ("rank 0: warm-up, rank 1: build")."""
    last: dict[int, str] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"\[gpuperf rank (\d+)\] (.*)", line)
        if m:
            last[int(m.group(1))] = m.group(2).strip()
    return ", ".join(f"rank {r}: {w}" for r, w in sorted(last.items())) or "no rank started"


def run_model(run: ModelRun) -> dict[str, Any]:
    """Run it; the result rank 0 wrote (samples_ms: the slowest rank per iteration)."""
    implementation(run.scenario)
    check_devices(run)
    with tempfile.TemporaryDirectory(prefix="gpuperf-model-") as tmp:
        spec, out, log = Path(tmp) / "spec.json", Path(tmp) / "result.json", Path(tmp) / "log"
        write_text(spec, json.dumps(run.spec()))
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={run.nproc}",
               "--standalone", "-m", "gpuperf.measure.model_worker", "--spec", str(spec),
               "--out", str(out)]  # fmt: skip
        extra = {"GPUPERF_DEVICE": run.device}
        if run.scenario.cuda_graphs and run.nproc > 1:
            # No NCCL calls run beside a replayed graph, so NCCL's support for mixing them
            # (which can deadlock CUDA, NCCL's CUDA-graph notes) is not needed.
            extra["NCCL_GRAPH_MIXING_SUPPORT"] = "0"
        env = child_env(extra)
        try:
            code = run_workers(cmd, env, log, run.timeout_s, remove=Path(tmp))
        except WorkersTimedOut as exc:
            ranks = sorted(Path(tmp).glob("result.rank*.json"))
            why = f" ({json.loads(ranks[0].read_text()).get('error')})" if ranks else ""
            raise EnvironmentUnavailable(
                f"the {implementation(run.scenario)} run timed out after {run.timeout_s:g} s "
                f"({stages(log)}); killed {exc.killed} processes{why}"
            ) from None
        result = json.loads(out.read_text()) if out.exists() else {}
        ranks = sorted(Path(tmp).glob("result.rank*.json"))
        if code != 0 or "error" in result or not result.get("samples_ms"):
            first = json.loads(ranks[0].read_text()) if ranks else {}
            why = result.get("error") or first.get("error") or last_error(log)
            raise ModelRunFailed(f"{implementation(run.scenario)} run failed: {why}")
        return result
