"""How sure a prediction is: what the committed measurements say of predictions like it.

Every prediction carries a track record (`extra["track_record"]`, the footer's `accuracy`
line): the held-out error, measured, of the class of runs the prediction belongs to, on the GPU
it is for. The numbers come from `track_record.json` beside this module, which
`benchmarks/accuracy.py --write-track-record` derives from the result files under
benchmarks/results/ (real runs) and `benchmarks/published_training.py`'s published tables; a
test regenerates it, so it cannot drift from the model. Nothing here changes a prediction.

Which class a prediction belongs to:
- one GPU, Hugging Face-style eager kernels (impl=eager): its whole-model class (prefill,
  decode eager or as a CUDA graph, training, checkpointed training; MoE apart);
- one GPU, fused kernels (a serving engine's or Megatron's): no such whole step was run here,
  so the record is of its kernels (GEMMs of LLM layers, attention);
- a parallel plan inside one node: its multi-GPU class (data-parallel, tensor-, pipeline-,
  context-parallel), measured on H200s; fused training plans and plans past one node: the
  published training runs (NVIDIA's, Megatron-LM's, Llama 3's), dense or MoE;
- a single op: its kernel class;
- a serving simulation (`gpuperf serve`): its engine's runs on its GPU, the public sample's
  held-out rows for the vLLM-, SGLang- and TensorRT-LLM-like profiles (mean TTFT and TPOT per
  row), the Hugging Face continuous-batching runs measured here for hf (wall time, TTFT and
  TPOT medians per run); a profile of the user's has none.
A GPU without measurements says so: one that borrows another's fitted parameters (params_from)
shows how far borrowed parameters carried for the H200 on the H100's; others have none.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuperf.hardware.spec import GpuSpec
    from gpuperf.perfmodel.ops import Op

RECORD = Path(__file__).with_name("track_record.json")
UNREADABLE = "the track record (gpuperf/step/track_record.json) is unreadable"
TRANSFER_GPU = (
    "h200-sxm-141gb"  # the GPU benchmarks/accuracy.py predicts with the H100's parameters
)
PUBLISHED_GPU = "h100-sxm5-80gb"  # the GPU of the published training runs
NCCL_RANKS = 4  # the measured NCCL runs: 2 to this many ranks, on NVLink in one node, no NVLS
# `gpuperf serve`'s classes: per run of Hugging Face continuous batching measured here (the
# summary key each compares), per row of the public sample (its client's means).
SERVE_HF = {"wall_s": "wall time", "ttft_p50_ms": "TTFT p50", "tpot_p50_ms": "TPOT p50"}
SERVE_PUBLIC = ("TTFT mean", "TPOT mean")


def e2e_class(scenario: dict[str, Any], moe: bool = False) -> str:
    """The accuracy class of a one-GPU Hugging Face run (benchmarks/device/e2e_hf.py)."""
    mode = scenario.get("mode")
    if mode == "train":
        if scenario.get("recompute") in ("full", "op"):
            return "checkpointed training step"
        return "MoE training step (HF)" if moe else "training step"
    if moe:
        return f"MoE whole model (HF), {'decode' if mode == 'decode' else 'prefill'}"
    return "whole-model decode" if mode == "decode" else "whole-model prefill"


def decode_variant(cls: str, cuda_graphs: bool) -> str:
    """The whole-model decode class split by how the step is launched (the record keeps both:
    an eager step waits on its host, a graph's does not)."""
    if cls != "whole-model decode":
        return cls
    return cls + (", CUDA graph" if cuda_graphs else ", eager")


def plan_class(scenario: dict[str, Any]) -> str:
    """The accuracy class of a parallel plan run under torchrun (gpuperf validate --nproc)."""
    if scenario.get("pp", 1) > 1:
        return "pipeline-parallel prefill and training"
    if scenario.get("cp", 1) > 1:
        return "context-parallel prefill and training"
    mode = scenario.get("mode")
    if scenario.get("tp", 1) == 1 or (scenario.get("dp", 1) > 1 and mode == "train"):
        return "data-parallel training (DDP, FSDP2)"
    if mode == "decode":
        return "tensor-parallel decode, " + (
            "CUDA graph" if scenario.get("cuda_graphs") else "eager"
        )
    return "tensor-parallel prefill" if mode == "prefill" else "tensor-parallel training"


@functools.cache
def _record() -> dict[str, Any]:
    try:
        return json.loads(RECORD.read_text())
    except (OSError, ValueError):  # a damaged install: predictions go on without a record
        return {}


def _entry(gpu: str, cls: str, *, transfer: bool = False) -> dict[str, Any] | None:
    rec = _record()
    table = rec.get("transfer", {}) if transfer else rec.get("gpus", {}).get(gpu, {})
    got = table.get(cls)
    return None if got is None else {"class": cls, "gpu": gpu, **got}


def _measured_chip(gpu: GpuSpec, measured: Any = None) -> str | None:
    """The measured profile of this GPU's chip among `measured` (the names of the profiles that
    have runs; default: the record's GPUs): its own, or the built-in one it describes (a user's
    calibration of an H100, say)."""
    gpus = _record().get("gpus", {}) if measured is None else measured
    if gpu.name in gpus:
        return gpu.name
    if gpu.params_from:
        return None
    from gpuperf.hardware.loader import load_gpu

    for name in gpus:
        if gpu.same_chip(load_gpu(name)):
            return name
    return None


def _result(basis: str, entries: list[tuple[str, dict[str, Any] | None]]) -> dict[str, Any]:
    """The record: the basis and the classes that have runs; classes asked for without any are
    named in the basis (a lookup never passes over them in silence)."""
    missing = [cls for cls, e in entries if e is None]
    if missing:
        basis += f"; no held-out runs of: {', '.join(missing)}"
    return {"basis": basis, "classes": [e for _, e in entries if e is not None]}


def _at(gpu: str, classes: list[str], *, transfer: bool = False) -> list[tuple[str, Any]]:
    return [(c, _entry(gpu, c, transfer=transfer)) for c in classes]


def _not_measured(why: str) -> dict[str, Any]:
    return {"basis": f"not measured: {why}", "classes": []}


def kernel_classes(scenario: dict[str, Any], moe: bool) -> tuple[str, ...]:
    """The op classes (perfmodel.op_classes) of a step's GEMMs and attention, which a step of
    fused kernels is judged by: its GEMMs' format and token count, its experts', its attention's
    queries (a generation: both)."""
    mode, dtype = scenario.get("mode"), scenario.get("dtype")
    if scenario.get("weight_dtype"):
        gemm = "gemm weight-only int4/int8"
    elif dtype == "fp8":
        gemm = "gemm fp8 LLM shapes (16-8192 tokens)"
    elif mode == "decode" and scenario.get("batch", 1) <= 32:
        gemm = "gemm few tokens (M<=32)"
    else:
        gemm = "gemm LLM layer shapes"
    out = [gemm]
    if moe:
        out.append("grouped gemm fp8 (MoE experts)" if dtype == "fp8" else
                   "grouped gemm (MoE experts)")  # fmt: skip
    if mode in ("prefill", "train", "generate"):
        out.append("attention prefill")
    if mode in ("decode", "generate"):
        out.append("attention decode")
    return tuple(out)


def for_model(scenario: dict[str, Any], moe: bool, gpu: GpuSpec, gpus: int,
              nodes: int = 1) -> dict[str, Any]:  # fmt: skip
    """The track record of a model step (module docstring)."""
    if not _record():
        return _not_measured(UNREADABLE)
    mode = scenario.get("mode")
    train = mode == "train"
    eager = scenario.get("impl") in ("eager", "compile")  # PyTorch's own training
    split = [scenario.get(k, 1) for k in ("tp", "pp", "cp", "ep")]
    if not train and split == [1, 1, 1, 1]:  # inference replicas: each GPU runs the one-GPU step
        gpus = nodes = 1
    chip = _measured_chip(gpu)
    if gpus > 1 and (nodes > 1 or (train and not eager)):
        return _published(moe, chip, train and not eager)
    kernels = kernel_classes(scenario, moe)
    graphs = bool(scenario.get("cuda_graphs"))
    modes = ("prefill", "decode") if mode == "generate" else (mode,)  # a prefill, then decodes
    whole = [decode_variant(e2e_class({**scenario, "mode": m}, moe), graphs) for m in modes]
    if chip is None:  # a borrowing GPU: how its lender's class carried to the H200
        like = tuple(whole) if eager and not _unrun_format(scenario) else kernels
        return _unmeasured(gpu, gpus, like)
    if not eager or _unrun_format(scenario):
        return _kernels(chip, kernels, gpus, eager)
    memory = f"peak memory, {'training' if train else 'inference'} "
    if gpus > 1:
        classes = _plan_classes(scenario, modes)
        multi = _record().get("multigpu", {})
        gpu_name, counts = multi.get("gpu", ""), multi.get("gpus", [])
        if moe or not classes:
            kind = "MoE plan" if moe else "plan of this kind"
            return _not_measured(f"no {kind} was run (the plans measured: dense, {gpu_name})")
        sizes = " or ".join(map(str, counts)) or "several"
        return _result(
            f"held-out runs of this kind of plan on {sizes} {gpu_name} under torchrun",
            _at(gpu_name, [*classes, memory + "(parallel plans)"]),
        )
    return _result(f"held-out Hugging Face runs of this kind on {chip}",
                   _at(chip, [*whole, memory + "(one GPU, Hugging Face)"]))  # fmt: skip


def _unrun_format(scenario: dict[str, Any]) -> bool:
    """An eager step in a format no Hugging Face run used (they ran bf16, whole recompute)."""
    return (scenario.get("dtype") not in ("bf16", "fp16") or bool(scenario.get("weight_dtype"))
            or scenario.get("kv_dtype") not in (None, "bf16", "fp16")
            or scenario.get("recompute") == "selective")  # fmt: skip


def _plan_classes(scenario: dict[str, Any], modes: tuple[str, ...]) -> list[str]:
    """The multi-GPU classes of a plan's step, none where no plan of its kind was run (a
    pipeline or context-parallel decode)."""
    out = []
    for m in modes:
        if m == "decode" and (scenario.get("pp", 1) > 1 or scenario.get("cp", 1) > 1):
            return []
        out.append(plan_class({**scenario, "mode": m}))
    return out


def _kernels(chip: str, kernels: tuple[str, ...], gpus: int, eager: bool) -> dict[str, Any]:
    what = "eager step in this format" if eager else "fused-kernel step"
    where = "" if gpus == 1 else ", nor a plan of them"
    return _result(f"held-out kernels on {chip}: no whole {what} was run{where}",
                   _at(chip, list(kernels)))  # fmt: skip


def _published(moe: bool, chip: str | None, fused_training: bool) -> dict[str, Any]:
    if not fused_training:
        return _not_measured("no inference or eager plan past one node was run")
    if chip != PUBLISHED_GPU:
        return _not_measured("the published training runs are on H100s, not this GPU")
    arch = "mixture of experts (and hybrid)" if moe else "dense"
    got = _record().get("published", {}).get(arch)
    cls = f"published H100 training runs, {arch}"
    return _result("NVIDIA's, Megatron-LM's and Llama 3's tables, nothing fitted to them",
                   [(cls, None if got is None else {"class": cls, **got})])  # fmt: skip


def _unmeasured(gpu: GpuSpec, gpus: int, kernels: tuple[str, ...]) -> dict[str, Any]:
    if gpu.params_from and gpus == 1:
        return _result(
            f"not measured on {gpu.name}, which borrows {gpu.params_from}'s fitted parameters; "
            "how far borrowed parameters carried: the H200 predicted with the H100's",
            _at(TRANSFER_GPU, list(kernels), transfer=True),
        )
    if gpu.params_from:
        return _not_measured(f"{gpu.name} has no runs here ({gpu.params_from}'s parameters)")
    if gpu.calibrated:
        return _not_measured(f"{gpu.name} has no runs here; its parameters are its own fit")
    return _not_measured(f"{gpu.name} has no runs here and no fitted parameters (datasheet "
                         "numbers, gpuperf's generic efficiencies)")  # fmt: skip


def for_ops(ops: list[Op], gpu: GpuSpec, *, nodes: int = 1, nvls: bool = False) -> dict[str, Any]:
    """The track record of single kernels or collectives (their classes: perfmodel.op_classes,
    in order, each once); for collectives, what of their topology (ranks, nodes, NVLS, GPU) the
    measured NCCL runs lacked."""
    from gpuperf.perfmodel.op_classes import op_class

    classes = list(dict.fromkeys(op_class(op) for op in ops))
    if not _record():
        return _not_measured(UNREADABLE)
    if all(c.startswith(("collective", "p2p")) for c in classes):
        multi = _record().get("multigpu", {}).get("gpu", "")
        ranks = max(getattr(op, "ranks", 2) for op in ops)  # a send/recv: two
        gaps = [f"{nodes} nodes" if nodes > 1 else "", f"{ranks} ranks" if ranks > NCCL_RANKS
                else "", "NVLS" if nvls else "", gpu.name if gpu.name != multi else ""]  # fmt: skip
        beyond = ", ".join(x for x in gaps if x)
        note = f" (2-{NCCL_RANKS} ranks in one node; not measured: {beyond})" if beyond else ""
        return _result(f"held-out NCCL runs on {multi}{note}", _at(multi, classes))
    chip = _measured_chip(gpu)
    if chip is None:
        return _unmeasured(gpu, 1, tuple(classes))
    these = "this class" if len(classes) == 1 else "these classes"
    return _result(f"held-out kernels of {these} on {chip}", _at(chip, classes))


def for_serve(engine: str | None, gpu: GpuSpec, tp: int) -> dict[str, Any]:
    """The track record of a serving simulation: `engine` is the built-in profile's name (None:
    a profile of the user's), each class's error per run (Hugging Face) or row (the public
    sample of vLLM, SGLang and TensorRT-LLM deployments, TP 1-8) on this GPU."""
    rec = _record()
    if not rec:
        return _not_measured(UNREADABLE)
    runs = rec.get("serve", {}).get(engine or "", {})
    if not runs:
        return _not_measured("an engine profile of the user's: the serving runs are of the "
                             "built-in ones" if engine is None else
                             f"no serving run of the {engine} profile")  # fmt: skip
    chip = _measured_chip(gpu, runs)
    if chip is None:
        return _not_measured(f"no {engine} serving run on {gpu.name} (runs on: "
                             f"{', '.join(sorted(runs))})")  # fmt: skip
    if engine == "hf":
        if tp > 1:
            return _not_measured("the Hugging Face serving runs were on one GPU")
        basis = (f"held-out Hugging Face continuous-batching runs on {chip}: bursts, Poisson "
                 "arrivals and closed loops of Llama models and of families no fit "
                 "used (Qwen2, Qwen3, Mistral, Phi-3, Pythia)")  # fmt: skip
        classes = list(SERVE_HF.values())
    else:
        basis = (f"held-out rows of the public aiconfigurator sample of {engine} on {chip}, "
                 "measured by others, closed loops of users, TP 1-8")  # fmt: skip
        classes = list(SERVE_PUBLIC)
    got = runs[chip]
    return _result(basis, [(c, {"class": c, "gpu": chip, **got[c]} if c in got else None)
                           for c in classes])  # fmt: skip


def line(record: dict[str, Any]) -> str:
    """The footer's text: each class's median error (90th percentile, runs), then the basis."""
    parts = [f"{e['class']} {e['median_pct']:.1f}% (p90 {e['p90_pct']:.0f}%, n={e['n']})"
             for e in record.get("classes", [])]  # fmt: skip
    basis = record.get("basis", "")
    return "; ".join(parts) + f"  ({basis})" if parts else basis
