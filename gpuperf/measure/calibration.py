"""The calibration set: kernels measured on a present GPU so that `gpuperf calibrate` can fit the
time model's parameters (gpuperf.perfmodel.calibrate.OP_PARAMS), and the host's per-kernel
dispatch cost.

The set is chosen so that every op-level parameter moves the prediction of several of its ops
(`constrained_params` checks it): square and LLM-shaped bf16 GEMMs with M from 1 to 8192 (gemm_eff,
gemm_fill_ksteps, gemm_mem_eff for the skinny, weight-bound ones), misaligned GEMMs
(gemm_misaligned_eff), copies and elementwise ops from 4 KiB to 1 GiB (kernel_floor_s, mem_eff,
bytes_for_half_bw, l2_bw_factor below half the L2; issue_gelu, issue_silu), RMSNorm, LayerNorm and
softmax over few and many rows (row_latency_s, issue_<fn>, norm/softmax_extra_reads, bw_sm_frac),
and attention prefill and decode (attn_eff, attn_fill_blocks, mma_latency_s). With several GPUs
present, NCCL all-reduce, all-gather, reduce-scatter and broadcast from 64 KiB to 1 GiB on all of
them and on 2 (`measure_collective_set`) constrain the comm_* parameters (link efficiency, latency
scale, call floor, ring copy tail); on one GPU they are left as the base profile has them.

Shapes are fixed, so two runs measure the same ops. Live calibration fits on every op it measures:
the calibration/held-out split (calibrate.is_calibration) only applies to result files.
Short budgets keep the whole set under about a minute on an H100.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.hardware.spec import GpuSpec
from gpuperf.measure.kernels import WrongResult, measure_op
from gpuperf.measure.timing import Budget
from gpuperf.perfmodel.calibrate import (
    HOST_PARAMS,
    OP_PARAMS,
    Sample,
    with_params,
)
from gpuperf.perfmodel.host_pool import attn_plan_s
from gpuperf.perfmodel.ops import Attention, Copy, Elementwise, Gemm, Norm, Op
from gpuperf.perfmodel.roofline import op_time

BUDGET = Budget(warmup_ms=5.0, rep_ms=20.0, min_reps=5, max_reps=200)
CPU_BUDGET = Budget(warmup_ms=1.0, rep_ms=3.0, min_reps=3, max_reps=50)
SOURCE = "live calibration"
# Parameters only collectives on several GPUs can constrain (the NCCL knobs are named comm_*).
MULTI_GPU_PARAMS = frozenset(p for p in OP_PARAMS if p.startswith("comm_"))
MiB = 2**20

Progress = Callable[[int, int, str], None]


def _gemms(tiny: bool) -> list[Op]:
    if tiny:
        square = [16, 64, 128]
        tokens = [1, 8, 64]
        layers = {"qkv": (192, 64), "up": (256, 64), "down": (64, 256)}
        odd = [(32, 65, 64), (64, 64, 67)]
    else:
        square = [256, 512, 1024, 2048, 4096, 8192]
        tokens = [1, 8, 32, 128, 512, 2048, 8192]
        # Llama-3-8B's layer: fused QKV (32 + 2·8 heads of 128), MLP up (14336) and down.
        layers = {"qkv": (6144, 4096), "up": (14336, 4096), "down": (4096, 14336)}
        odd = [(2048, 4097, 4096), (2048, 4096, 4099), (1000, 1001, 1003)]
    ops: list[Op] = [Gemm(f"calib/gemm/{n}", n, n, n) for n in square]
    ops += [
        Gemm(f"calib/t{m}/{name}", m, n, k)  # "/t<M>/": the accuracy class of LLM layer GEMMs
        for m in tokens
        for name, (n, k) in layers.items()
    ]
    ops += [Gemm(f"calib/misaligned/{m}x{n}x{k}", m, n, k) for m, n, k in odd]
    return ops


def _streams(tiny: bool) -> list[Op]:
    sizes = [4096, 64 * 1024, MiB] if tiny else [4096] + [MiB * 4**i for i in range(6)]  # ..1 GiB
    ops: list[Op] = [Copy(f"calib/copy/{b}", b) for b in sizes]
    for b in sizes:
        n = b // 2  # bf16 elements
        ops.append(Elementwise(f"calib/add/{n}", "add", n, 2, 1, "bf16"))
        ops.append(Elementwise(f"calib/silu/{n}", "silu", n, 1, 1, "bf16", None, 4.0))
        if b >= MiB:  # HF's repeat_kv copy out of a broadcast view: pins strided_copy_eff
            ops.append(Elementwise(f"calib/repeat_kv/{n}", "repeat_kv", n, 1, 1, "bf16", None, 0.0))
            # weight * x with the weight broadcast (an eager RMSNorm's): pins issue_generic
            ops.append(Elementwise(f"calib/mul_bcast/{n}", "mul", n, 1, 1, "bf16", None, 1.0, True))
        # GELU and SiLU do the most arithmetic per byte: they pin issue_gelu and issue_silu.
        ops.append(Elementwise(f"calib/gelu/{n}", "gelu", n, 1, 1, "bf16", None, 8.0))
    return ops


def _rows(tiny: bool) -> list[Op]:
    if tiny:
        norms, softmax = [(1, 64), (32, 256)], [(4, 128), (64, 512)]
    else:
        norms = [(1, 4096), (16, 4096), (128, 8192), (1024, 4096), (8192, 4096), (32768, 8192)]
        softmax = [(32, 4096), (1024, 1024), (4096, 4096), (16384, 2048), (2048, 32768)]
    ops: list[Op] = [
        Norm(f"calib/{fn}/{r}x{c}", fn, r, c) for fn in ("rmsnorm", "layernorm") for r, c in norms
    ]
    ops += [Norm(f"calib/softmax/{r}x{c}", "softmax", r, c) for r, c in softmax]
    return ops


def _attention(tiny: bool) -> list[Op]:
    if tiny:  # (batch, heads, kv_heads, q_len, kv_len, head_dim)
        shapes = [(1, 2, 2, 32, 32, 32), (2, 4, 2, 1, 64, 32)]
    else:
        shapes = [
            (1, 32, 32, 512, 512, 128),
            (16, 32, 32, 512, 512, 128),  # short prefill in a batch: many CTAs, fill-dominated
            (8, 32, 8, 1024, 1024, 128),
            (1, 32, 32, 2048, 2048, 128),
            (1, 32, 8, 8192, 8192, 128),
            (4, 32, 8, 2048, 2048, 128),
            # head dim 64, where the softmax binds (attn_softmax_ops: a late stage of three rows)
            (8, 32, 32, 1024, 1024, 64),
            (2, 16, 16, 4096, 4096, 64),
            (4, 32, 8, 2048, 2048, 64),
            (1, 32, 8, 1, 2048, 128),
            (16, 32, 8, 1, 4096, 128),
            (64, 32, 32, 1, 2048, 128),
        ]
    ops: list[Op] = [
        Attention(f"calib/attn/b{b}h{h}/{kv}q{q}kv{n}d{d}", b, h, kv, q, n, d, True)
        for b, h, kv, q, n, d in shapes
    ]
    # Decode with an explicit mask, as HF's StaticCache runs it.
    masked = [(2, 4, 1, 64, 32)] if tiny else [(8, 32, 1, 4096, 128), (16, 32, 1, 2048, 128)]
    ops += [
        Attention(f"calib/attn_mask/b{b}h{h}q{q}kv{n}d{d}", b, h, h, q, n, d, True, mask=True)
        for b, h, q, n, d in masked
    ]
    return ops


def calibration_ops(device: str = "cuda") -> list[Op]:
    """The calibration set for `device`: full sizes on a GPU, tiny ones on the CPU (tests)."""
    tiny = not device.startswith("cuda")
    return [*_gemms(tiny), *_streams(tiny), *_rows(tiny), *_attention(tiny)]


def measure_calibration_set(
    gpu: GpuSpec,
    device: str = "cuda",
    on_progress: Progress | None = None,
    budget: Budget | None = None,
) -> list[Sample]:
    """Measure the calibration set on `device`; one Sample per op measured.

    `gpu` is the base profile (used only to say which ops it predicts: the samples hold measured
    times). Ops that cannot run here (out of memory, a wrong result) are skipped and reported
    through on_progress(done, total, message); if none runs, EnvironmentUnavailable.
    """
    ops = calibration_ops(device)
    budget = budget or (BUDGET if device.startswith("cuda") else CPU_BUDGET)
    samples: list[Sample] = []
    for i, op in enumerate(ops, 1):
        try:
            m = measure_op(op, device, budget)
        except (InputError, EnvironmentUnavailable, WrongResult) as exc:
            if on_progress:
                on_progress(i, len(ops), f"skipped {op.name}: {exc}")
            continue
        samples.append(Sample(op, m.timing.median_s, SOURCE))
        if on_progress:
            t = m.timing.median_s
            pred = op_time(op, gpu).time
            on_progress(i, len(ops), f"{op.name:38s} {t * 1e3:9.4f} ms (base predicts "
                                     f"{pred * 1e3:.4f} ms)")  # fmt: skip
    if not samples:
        raise EnvironmentUnavailable(f"no calibration op could be measured on {device}")
    return samples


COLL_SET = ("allreduce", "allgather", "reducescatter", "broadcast")
COLL_SIZES = (64 * 1024, MiB, 16 * MiB, 256 * MiB, 1024 * MiB)


def collective_ranks(device: str) -> list[int]:
    """Rank counts the collective set runs on: every GPU, and 2 when there are more (the ring copy
    tail weighs most on 2 ranks, so the two counts separate it from the link rate). None on one
    GPU or off CUDA."""
    if not device.startswith("cuda"):
        return []
    import torch

    n = torch.cuda.device_count()
    return [] if n < 2 else sorted({2, n})


def measure_collective_set(
    ranks: Sequence[int],
    device: str = "cuda",
    on_progress: Progress | None = None,
    sizes: Sequence[int] = COLL_SIZES,
    colls: Sequence[str] = COLL_SET,
    timeout_s: float = 180.0,
) -> list[Sample]:
    """NCCL (gloo on the CPU) collectives through torchrun, one launch per collective and rank
    count; a Sample per size. A launch that fails or times out is reported and skipped."""
    from gpuperf.errors import GpuperfError
    from gpuperf.measure.coll_report import op_of
    from gpuperf.measure.collectives import Launch, run_collective

    samples: list[Sample] = []
    todo = [(c, n) for n in ranks for c in colls]
    for i, (coll, n) in enumerate(todo, 1):
        try:
            _, rows = run_collective(coll, list(sizes), Launch(nproc=n, device=device),
                                     rep_ms=20.0, timeout_s=timeout_s)  # fmt: skip
        except GpuperfError as exc:
            if on_progress:
                on_progress(i, len(todo), f"skipped {coll} on {n} ranks: {exc}")
            continue
        good = [r for r in rows if r.get("measured_ms") and not r.get("wrong")]
        samples += [Sample(op_of(r), r["measured_ms"] / 1e3, SOURCE) for r in good]
        if on_progress:
            bus = max((r.get("busbw_gbps", 0.0) for r in good), default=0.0)
            on_progress(i, len(todo), f"{coll} on {n} ranks: {len(good)} sizes, busbw up to "
                                      f"{bus:.0f} GB/s")  # fmt: skip
    return samples


def constrained_params(ops: Sequence[Op], gpu: GpuSpec, min_change: float = 0.05) -> list[str]:
    """The OP_PARAMS whose bounds change the predicted time of at least two of `ops` by more than
    `min_change` (relative): the parameters a fit on these ops can determine."""
    out = []
    for name, (lo, hi) in OP_PARAMS.items():
        at_lo, at_hi = with_params(gpu, **{name: lo}), with_params(gpu, **{name: hi})
        moved = 0
        for op in ops:
            a, b = op_time(op, at_lo).time, op_time(op, at_hi).time
            if abs(math.log(a / b)) > math.log1p(min_change):
                moved += 1
        if moved >= 2:
            out.append(name)
    return out


def measure_host_dispatch(device: str = "cuda", calls: int | None = None, reps: int = 5) -> float:
    """Seconds of host time per kernel for bare eager PyTorch: a tiny Llama-style decode layer
    (40 small kernels: linear, SDPA, cat, elementwise) called `calls` times (20 on a GPU: 800
    kernels, less than the launch queue holds) on the host clock, starting from an idle GPU;
    median over `reps` loops.

    The GPU finishes each tiny kernel before the host issues the next, so the loop measures the
    host. Hugging Face models cost more per kernel than this bare loop (module hooks, cache and
    mask logic in Python): 17-43 µs per kernel on an H100 host in the committed e2e runs
    (benchmarks/results/h100-sxm5-80gb/e2e_hf_run2.json, host_probe) against 7-17 µs for single
    bare ops (its "launch" block). Calibrate from e2e runs (--from) to model HF's eager code.
    On the CPU the kernels run inside the call: the number is compute, not dispatch.
    """
    import torch

    from gpuperf.measure.eager_layer import aten_kernels, build_layer, layer_shape
    from gpuperf.workloads.config import ModelConfig
    from gpuperf.workloads.scenario import Scenario

    cfg = ModelConfig(name="host-probe", hidden_size=256, intermediate_size=512,
                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=1)  # fmt: skip
    layer = build_layer(layer_shape(cfg, Scenario(mode="decode", batch=1, ctx=64)), device)
    cuda = device.startswith("cuda")
    calls = calls or (20 if cuda else 2)
    with torch.no_grad():
        kernels = len(aten_kernels(layer.run))
        for _ in range(3):
            layer.run()
        per_kernel = []
        for _ in range(reps):
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            for _ in range(calls):
                layer.run()
            per_kernel.append((time.perf_counter() - t0) / (calls * kernels))
        if cuda:
            torch.cuda.synchronize(device)
    return statistics.median(per_kernel)


def measure_attn_plan(device: str = "cuda", lengths: int = 8) -> float:
    """host_attn_plan_s: host seconds SDPA's default backend spends on a decode-shaped call
    (batch 1, 32 heads, q_len 1, head dim 128) with a kv length it has not met, beyond a call on
    a length it has (host_pool.attn_plan_s). cuDNN plans every new shape: 23 ms on an H200 host,
    32 ms on an H100 one (sdpa_shape_probe.json); flash and efficient cost nothing extra."""
    import torch
    import torch.nn.functional as F

    dt = torch.bfloat16 if device.startswith("cuda") else torch.float32
    rows = []
    for seen in (False, True):
        for kv in range(7001, 7001 + lengths):  # lengths no other calibration op uses
            q = torch.randn(1, 32, 1, 128, device=device, dtype=dt)
            k, v = (torch.randn(1, 32, kv, 128, device=device, dtype=dt) for _ in range(2))
            if device.startswith("cuda"):
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v)
            host = (time.perf_counter() - t0) * 1e3
            rows.append({"backend": "default", "seen_before": seen, "host_ms": host})
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return attn_plan_s(rows) or 0.0


@dataclass(frozen=True, slots=True)
class LiveCalibration:
    """What `gpuperf calibrate` (no --from) fits: the base profile, the measured samples, the
    parameters they constrain, and the measured per-kernel host dispatch (seconds)."""

    base: GpuSpec
    device: str
    samples: list[Sample]
    fit_names: list[str]
    host_dispatch_s: float
    host_attn_plan_s: float


def live_calibration(
    gpu: str | None,
    device: str,
    allow_cpu: bool,
    echo: Callable[[str], None],
    collectives: bool = True,
) -> LiveCalibration:
    """Resolve the device and base profile, measure the set and the host, report to `echo`."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.measure.torch_import import import_torch

    torch = import_torch()
    if device == "cpu":
        if not allow_cpu:
            raise InputError("parameters fitted on a CPU are meaningless for a GPU profile; "
                             "add --allow-cpu to write one anyway (tests)")  # fmt: skip
        if gpu is None:
            raise InputError("--device cpu needs --gpu (the base profile to write over)")
    elif not torch.cuda.is_available():
        raise EnvironmentUnavailable(
            "no CUDA GPU found: calibrate from result files with --from, or measure on the CPU "
            "with --device cpu --allow-cpu (tests only)"
        )
    else:
        device = "cuda"
    base = load_gpu(gpu or "auto")
    n = len(calibration_ops(device))
    echo(f"measuring {n} calibration ops on {device} (live calibration fits on every op it "
         "measures; the held-out split applies to --from result files only)")  # fmt: skip
    samples = measure_calibration_set(base, device, lambda i, n, m: echo(f"  [{i}/{n}] {m}"))
    ranks = collective_ranks(device) if collectives else []
    if ranks:
        echo(f"measuring NCCL collectives on {' and '.join(map(str, ranks))} GPUs "
             "(one torchrun launch each, ~10 s apiece)")  # fmt: skip
        samples += measure_collective_set(ranks, device, lambda i, n, m: echo(f"  [{i}/{n}] {m}"))
    names = constrained_params([s.op for s in samples], base)
    skipped = [p for p in OP_PARAMS if p not in names]
    if skipped:
        echo(f"not fitted (the measured ops barely depend on them; kept from {base.name}): "
             + ", ".join(skipped))  # fmt: skip
    host = measure_host_dispatch(device)
    echo(
        f"host dispatch: {host * 1e6:.3g} µs per kernel of bare eager PyTorch (Hugging Face "
        "models cost more, 17-43 µs per kernel on an H100 host; fit e2e runs with --from)"
    )
    lo, hi = HOST_PARAMS["host_dispatch_s"]
    if not lo <= host <= hi:
        echo(f"warning: host dispatch {host * 1e6:.3g} µs is outside the model's bounds "
             f"({lo * 1e6:g}..{hi * 1e6:g} µs); written as measured")  # fmt: skip
    plan = measure_attn_plan(device)
    echo(f"attention plan: {plan * 1e3:.3g} ms of host time for SDPA on a shape it has not met "
         "(paid once per eager decode step on a growing cache)")  # fmt: skip
    return LiveCalibration(base, device, samples, names, host, plan)
