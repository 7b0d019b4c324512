"""How sure a prediction is: what the committed measurements say of predictions like it.

Every prediction carries a track record (`extra["track_record"]`, the footer's `track record`
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
- a single op: its kernel class.
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

RECORD = Path(__file__).with_name("track_record.json")
MOE_CLASSES = ("MoE training step (HF)", "MoE whole model (HF), prefill",
               "MoE whole model (HF), decode")  # fmt: skip


def e2e_class(scenario: dict[str, Any], moe: bool = False) -> str:
    """The accuracy class of a one-GPU Hugging Face run (benchmarks/device/e2e_hf.py)."""
    mode = scenario.get("mode")
    if mode == "train":
        if scenario.get("recompute") == "full":
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


def _measured_chip(gpu: GpuSpec) -> str | None:
    """The measured profile of this GPU's chip: its own, or the built-in one it describes (a
    user's calibration of an H100, say)."""
    gpus = _record().get("gpus", {})
    if gpu.name in gpus:
        return gpu.name
    if gpu.params_from:
        return None
    from gpuperf.hardware.loader import load_gpu

    for name in gpus:
        if gpu.same_chip(load_gpu(name)):
            return name
    return None


def _result(basis: str, entries: list[dict[str, Any] | None]) -> dict[str, Any]:
    return {"basis": basis, "classes": [e for e in entries if e is not None]}


def for_model(scenario: dict[str, Any], moe: bool, gpu: GpuSpec, gpus: int,
              nodes: int = 1) -> dict[str, Any]:  # fmt: skip
    """The track record of a model step (module docstring)."""
    mode = scenario.get("mode")
    train = mode == "train"
    eager = scenario.get("impl") == "eager"
    split = [scenario.get(k, 1) for k in ("tp", "pp", "cp", "ep")]
    if not train and split == [1, 1, 1, 1]:  # inference replicas: each GPU runs the one-GPU step
        gpus = nodes = 1
    if gpus > 1 and (nodes > 1 or (train and not eager)):
        return _published(moe, gpus, nodes)
    chip = _measured_chip(gpu)
    if chip is None:
        return _unmeasured(scenario, moe, gpu, gpus)
    memory = f"peak memory, {'training' if train else 'inference'} "
    if gpus > 1:
        if not eager:
            return _fused(scenario, chip, gpus)
        cls = plan_class(scenario)
        multi = _record().get("multigpu", {})
        gpu_name, counts = multi.get("gpu", ""), multi.get("gpus", [])
        sizes = " or ".join(map(str, counts)) or "several"
        return _result(
            f"held-out runs of this kind of plan on {sizes} {gpu_name} under torchrun",
            [_entry(gpu_name, cls), _entry(gpu_name, memory + "(parallel plans)")],
        )
    if not eager:
        return _fused(scenario, chip, gpus)
    graphs = bool(scenario.get("cuda_graphs"))
    modes = ("prefill", "decode") if mode == "generate" else (mode,)  # a prefill, then decodes
    classes = [decode_variant(e2e_class({**scenario, "mode": m}, moe), graphs) for m in modes]
    return _result(
        f"held-out Hugging Face runs of this kind on {chip}",
        [*(_entry(chip, c) for c in classes), _entry(chip, memory + "(one GPU, Hugging Face)")],
    )


def _fused(scenario: dict[str, Any], chip: str, gpus: int) -> dict[str, Any]:
    attn = "attention decode" if scenario.get("mode") == "decode" else "attention prefill"
    gemm = ("gemm fp8 LLM shapes (16-8192 tokens)" if scenario.get("dtype") == "fp8"
            else "gemm LLM layer shapes")  # fmt: skip
    where = "" if gpus == 1 else f", nor a {gpus}-GPU plan of them"
    return _result(
        f"held-out kernels on {chip}: no whole fused-kernel step was run{where}",
        [_entry(chip, gemm), _entry(chip, attn)],
    )


def _published(moe: bool, gpus: int, nodes: int) -> dict[str, Any]:
    arch = "mixture of experts (and hybrid)" if moe else "dense"
    got = _record().get("published", {}).get(arch)
    entry = None if got is None else {"class": f"published H100 training runs, {arch}", **got}
    return _result(
        "NVIDIA's, Megatron-LM's and Llama 3's tables, nothing fitted to them",
        [entry],
    )


def _unmeasured(scenario: dict[str, Any], moe: bool, gpu: GpuSpec, gpus: int) -> dict[str, Any]:
    if not gpu.params_from:
        return _result(f"not measured: {gpu.name} has no runs here and no fitted parameters "
                       "(datasheet numbers, gpuperf's generic efficiencies)", [])  # fmt: skip
    if scenario.get("impl") == "eager" and gpus == 1:
        cls = decode_variant(e2e_class(scenario, moe), bool(scenario.get("cuda_graphs")))
    else:
        cls = "gemm LLM layer shapes"
    return _result(
        f"not measured on {gpu.name}, which borrows {gpu.params_from}'s fitted parameters; how "
        "far borrowed parameters carried: the H200 predicted with the H100's",
        [_entry("h200-sxm-141gb", cls, transfer=True)],
    )


def for_ops(classes: list[str], gpu: GpuSpec | None) -> dict[str, Any]:
    """The track record of single kernels or collectives of the given classes
    (perfmodel.op_classes.op_class), in order, each once; gpu None: collectives alone."""
    classes = list(dict.fromkeys(classes))
    multi = _record().get("multigpu", {}).get("gpu", "")
    if all(c.startswith(("collective", "p2p")) for c in classes):
        return _result(f"held-out NCCL runs on {multi}", [_entry(multi, c) for c in classes])
    assert gpu is not None  # kernels are of a GPU
    chip = _measured_chip(gpu)
    if chip is None:
        if gpu.params_from:
            return _result(
                f"not measured on {gpu.name} ({gpu.params_from}'s parameters); the H200 "
                "predicted with the H100's",
                [_entry("h200-sxm-141gb", c, transfer=True) for c in classes],
            )
        return _result(f"not measured: {gpu.name} has no runs here", [])
    these = "this class" if len(classes) == 1 else "these classes"
    return _result(f"held-out kernels of {these} on {chip}", [_entry(chip, c) for c in classes])


def line(record: dict[str, Any]) -> str:
    """The footer's text: each class's median error (90th percentile, runs), then the basis."""
    parts = [f"{e['class']} {e['median_pct']:.1f}% (p90 {e['p90_pct']:.0f}%, n={e['n']})"
             for e in record.get("classes", [])]  # fmt: skip
    basis = record.get("basis", "")
    return "; ".join(parts) + f"  ({basis})" if parts else basis
