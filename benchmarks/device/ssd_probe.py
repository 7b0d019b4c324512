"""Mamba-2's kernels as Megatron-Core and vLLM run them, timed kernel by kernel.

Megatron-Core's MambaMixer (and Nemotron-H's in NeMo) runs the state-space duality (SSD) scan of
`mamba_ssm.ops.triton.ssd_combined` (Dao & Gu 2024): forward `_chunk_cumsum_fwd`,
`_chunk_state_fwd`, `_state_passing_fwd`, `_bmm_chunk_fwd`, `_chunk_scan_fwd`; backward those
four again (recomputed) and a dozen more. The gate's RMSNorm is `layernorm_gated`'s Triton
kernel; a decode step updates each sequence's state with `selective_state_update`. These are
Triton kernels, timed here through mamba_ssm's own Python (its Triton files and einops are
carried onto the device: PYTHONPATH=.carry/pylib; none of it is part of gpuperf).

    PYTHONPATH=.carry/pylib python3 benchmarks/device/ssd_probe.py OUT_DIR
    PYTHONPATH=.carry/pylib python3 benchmarks/device/ssd_probe.py OUT_DIR --held  # other models
    ... OUT_DIR --decode [--held]   # the decode state updates alone (ssd_decode[_held].json)
    ... --only TAG[,TAG]            # those shapes alone

Writes OUT_DIR/ssd_kernels.json: per shape, forward and backward, the kernels (name, µs, median
over profiled calls) and the whole call timed with CUDA events (median); the gated norm forward
and backward; decode state updates over batch sizes; then one row per (shape, kernel) with its
gpuperf op (a Scan kernel, or the gated norm's Elementwise) and measured_ms, as sweeps have.

    python3 benchmarks/device/ssd_probe.py --ops FILE   # add the op rows to an older file
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_kernels_probe import kernel_calls, short_name  # noqa: E402  (this folder)

# (tag, batch, seqlen, heads, head_dim, state, groups, chunk): Nemotron-H / Nemotron 3 mixers and
# the original Mamba-2, with tensor-parallel shares of some.
SHAPES = [
    ("nemotron3-nano", 1, 8192, 64, 64, 128, 8, 128),
    ("nemotron3-nano", 4, 4096, 64, 64, 128, 8, 128),
    ("nemotron3-nano", 1, 2048, 64, 64, 128, 8, 128),
    ("nemotron3-super", 2, 4096, 128, 64, 128, 8, 128),
    ("nemotron3-super", 1, 8192, 128, 64, 128, 8, 128),
    ("nemotron-h-56b", 1, 8192, 256, 64, 256, 8, 128),
    ("nemotron-h-56b-tp4", 1, 8192, 64, 64, 256, 2, 128),
    ("nemotron-nano-9b-v2", 2, 4096, 128, 80, 128, 8, 128),
    ("mamba2-2.7b", 4, 2048, 80, 64, 128, 1, 256),
    ("nemotron3-nano", 8, 1024, 64, 64, 128, 8, 128),
]
# Other models' mixers, no shape of them in any fit (--held: ssd_kernels_held.json, "split":
# "held-out"): Mamba-Codestral-7B (and its TP=2 share), Zamba2-2.7B, Granite-4.0-H-Small,
# Nemotron-H-8B's TP=2 share at 16K tokens, Mamba-2-1.3B; chunks of 256 beside 128, one to eight
# groups. (Nemotron-H-8B's whole mixer is Nemotron 3 Super's shape, already in SHAPES.)
HELD_SHAPES = [
    ("mamba-codestral-7b", 1, 8192, 128, 64, 128, 8, 256),
    ("zamba2-2.7b", 2, 4096, 80, 64, 64, 1, 256),
    ("granite-4.0-h-small", 1, 8192, 128, 64, 128, 1, 256),
    ("mamba-codestral-7b-tp2", 2, 4096, 64, 64, 128, 4, 256),
    ("nemotron-h-8b-tp2", 1, 16384, 64, 64, 128, 4, 128),
    ("mamba2-1.3b", 8, 2048, 64, 64, 128, 1, 256),
]
# their decode state updates (--held --decode: ssd_decode_held.json), state sizes 64 and 128
# (8 and 4 rows a program), head dims 64 and 80, one to four groups (Codestral's whole mixer
# updates Nemotron 3 Super's shape, in DECODE_SHAPES: its TP=2 share instead)
HELD_DECODE = [("mamba-codestral-7b-tp2", 64, 64, 128, 4), ("zamba2-2.7b", 80, 64, 64, 1),
               ("granite-4.0-h-small", 128, 64, 128, 1), ("nemotron-nano-9b-v2", 128, 80, 128, 8),
               ("mamba2-1.3b", 64, 64, 128, 1)]  # fmt: skip
DECODE_BATCHES = (1, 8, 32, 128, 256)
DECODE_SHAPES = [("nemotron3-nano", 64, 64, 128, 8), ("nemotron3-super", 128, 64, 128, 8),
                 ("nemotron-h-56b", 256, 64, 256, 8)]  # fmt: skip


def _events(torch, fn, reps: int = 20) -> float:  # noqa: ANN001
    """Median ms of `fn` over `reps` calls, each timed with CUDA events."""
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def _kernels(torch, fn) -> list[tuple[str, float]]:  # noqa: ANN001
    """Each kernel of one call (name, median µs over profiled calls), in order."""
    calls = kernel_calls(torch, fn, calls=5)
    n = min(len(c) for c in calls)
    return [(short_name(calls[0][i][0]), round(statistics.median(c[i][1] for c in calls), 2))
            for i in range(n)]  # fmt: skip


def _scan_rows(torch, tag: str, b: int, L: int, H: int, P: int, N: int, G: int,
               Q: int) -> list[dict]:  # noqa: ANN001  # fmt: skip
    from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(b, L, H, P, device=dev, dtype=bf, requires_grad=True)
    dt = (torch.rand(b, L, H, device=dev, dtype=bf) - 4.0).requires_grad_()
    A = (-torch.rand(H, device=dev, dtype=torch.float32) * 8 - 1).requires_grad_()
    Bm = torch.randn(b, L, G, N, device=dev, dtype=bf, requires_grad=True)
    Cm = torch.randn(b, L, G, N, device=dev, dtype=bf, requires_grad=True)
    D = torch.randn(H, device=dev, dtype=torch.float32, requires_grad=True)
    dt_bias = torch.randn(H, device=dev, dtype=torch.float32, requires_grad=True)
    inputs = (x, dt, A, Bm, Cm, D, dt_bias)

    def fwd():  # noqa: ANN202
        return mamba_chunk_scan_combined(x, dt, A, Bm, Cm, Q, D=D, z=None, dt_bias=dt_bias,
                                         dt_softplus=True)  # fmt: skip

    out = fwd()
    go = torch.randn_like(out)

    def bwd():  # noqa: ANN202
        return torch.autograd.grad(out, inputs, go, retain_graph=True)

    di = H * P
    y = torch.randn(b * L, di, device=dev, dtype=bf, requires_grad=True)
    z = torch.randn_like(y, requires_grad=True)
    w = torch.ones(di, device=dev, dtype=bf, requires_grad=True)

    def norm_fwd():  # noqa: ANN202
        return rmsnorm_fn(y, w, None, z=z, eps=1e-5, group_size=di // G, norm_before_gate=False)

    nout = norm_fwd()
    ngo = torch.randn_like(nout)

    def norm_bwd():  # noqa: ANN202
        return torch.autograd.grad(nout, (y, z, w), ngo, retain_graph=True)

    shape = {"batch": b, "seqlen": L, "heads": H, "head_dim": P, "state": N, "groups": G,
             "chunk": Q}  # fmt: skip
    rows = []
    for part, fn in (("scan", fwd), ("scan.bwd", bwd), ("gated_norm", norm_fwd),
                     ("gated_norm.bwd", norm_bwd)):  # fmt: skip
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        kernels = _kernels(torch, fn)
        ms = _events(torch, fn)
        kms = sum(u for _, u in kernels) / 1e3
        rows.append({"model": tag, "part": part, "shape": shape, "event_ms": ms,
                     "kernel_ms": kms, "kernels": kernels})  # fmt: skip
        print(
            f"{tag:22s} b{b} L{L:<6d} {part:15s} {ms:8.3f} ms  "
            f"{len(kernels)} kernels {sum(u for _, u in kernels) / 1e3:8.3f} ms",
            flush=True,
        )
    return rows


def _decode_rows(torch, tag: str, H: int, P: int, N: int, G: int) -> list[dict]:  # noqa: ANN001
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update

    dev, bf = "cuda", torch.bfloat16
    rows = []
    for b in DECODE_BATCHES:
        for sdt in (torch.bfloat16, torch.float32):
            state = torch.randn(b, H, P, N, device=dev, dtype=sdt)
            x = torch.randn(b, H, P, device=dev, dtype=bf)
            # vLLM's and Megatron's inference: one dt, A, D per head, broadcast over head_dim
            dt = torch.randn(b, H, device=dev, dtype=bf)[..., None].expand(b, H, P)
            A = -torch.rand(H, device=dev)[:, None, None].expand(H, P, N)
            Bm = torch.randn(b, G, N, device=dev, dtype=bf)
            Cm = torch.randn(b, G, N, device=dev, dtype=bf)
            D = torch.randn(H, device=dev)[:, None].expand(H, P)
            dt_bias = torch.randn(H, device=dev)[:, None].expand(H, P)
            z = torch.randn(b, H, P, device=dev, dtype=bf)

            fn = functools.partial(selective_state_update, state, x, dt, A, Bm, Cm, D=D, z=z,
                                   dt_bias=dt_bias, dt_softplus=True)  # fmt: skip
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            kernels = _kernels(torch, fn)
            shape = {"batch": b, "heads": H, "head_dim": P, "state": N, "groups": G,
                     "state_dtype": str(sdt).replace("torch.", "")}  # fmt: skip
            kms = sum(u for _, u in kernels) / 1e3
            rows.append({"model": tag, "part": "state_update", "shape": shape,
                         "event_ms": _events(torch, fn), "kernel_ms": kms,
                         "kernels": kernels})  # fmt: skip
            print(
                f"{tag:22s} decode b{b:<4d} {shape['state_dtype']:9s} "
                f"{rows[-1]['kernel_ms'] * 1e3:8.1f} us",
                flush=True,
            )
    return rows


# mamba_ssm's Triton kernels -> gpuperf's Scan kernels (gpuperf.perfmodel.ops.Scan.cost)
KERNELS = {"_chunk_cumsum_fwd_kernel": "cumsum", "_chunk_state_fwd_kernel": "chunk_state",
           "_state_passing_fwd_kernel": "state_passing", "_bmm_chunk_fwd_kernel": "bmm",
           "_chunk_scan_fwd_kernel": "chunk_scan", "_chunk_scan_bwd_dstates_kernel": "dstates",
           "_state_passing_bwd_kernel": "state_passing_bwd",
           "_chunk_scan_chunk_state_bwd_dx_kernel": "dx", "_chunk_state_bwd_db_kernel": "db",
           "_chunk_scan_bwd_dc_kernel": "dc", "_chunk_scan_bwd_dcb_kernel": "dcb",
           "_bmm_chunk_bwd_kernel": "bmm_bwd", "_chunk_scan_bwd_ddAcs_stable_kernel": "ddacs",
           "_chunk_cumsum_bwd_kernel": "cumsum_bwd",
           "_selective_scan_update_kernel": "state_update"}  # fmt: skip


def op_rows(rows: list[dict]) -> list[dict]:
    """One row per (shape, kernel) in the sweep format (an op and its measured_ms, the median of
    its calls in the rows' kernel lists), for benchmarks/accuracy.py and the fit."""
    from gpuperf.perfmodel.ops import Scan
    from gpuperf.perfmodel.ops_io import op_to_dict
    from gpuperf.workloads.mamba_layers import gated_norm
    from gpuperf.workloads.transformer_train import fused_backward

    out: dict[tuple, list] = {}
    for r in rows:
        s, tag = r["shape"], r["model"]
        if r["part"].startswith("gated_norm"):
            n = s["batch"] * s["seqlen"] * s["heads"] * s["head_dim"]
            op = gated_norm(n, "bf16", f"{tag}/mamba/gated_norm")
            if r["part"].endswith(".bwd"):
                op = fused_backward(op)[0]
            k = [u for name, u in r["kernels"] if name.startswith("_layer_norm")]
            out.setdefault((tag, op), []).extend(k)
            continue
        dims = (s["batch"], s.get("seqlen", 1), s["heads"], s["head_dim"], s["state"],
                s["groups"], s.get("chunk", 1))  # fmt: skip
        sdt = "fp32" if s.get("state_dtype") == "float32" else "bf16"
        for name, us in r["kernels"]:
            kernel = KERNELS.get(name.split("(")[0].strip())
            if kernel is None:
                continue
            op = Scan(f"{tag}/mamba/scan.{kernel}", kernel, *dims, "bf16", sdt)
            out.setdefault((tag, op), []).append(us)
    return [{"op": op_to_dict(op), "name": op.name, "kind": op.kind, "shape": op.shape,
             "measured_ms": statistics.median(us) / 1e3, "calls": len(us)}
            for (_, op), us in out.items() if us]  # fmt: skip


def main() -> int:
    import torch

    from gpuperf.fileio import json_safe, write_text
    from gpuperf.measure.env import environment

    if sys.argv[1] == "--ops":  # the op rows of a file written before they were
        from gpuperf.fileio import json_safe, write_text

        path = Path(sys.argv[2])
        data = json.loads(path.read_text())
        data["rows"] = [r for r in data["rows"] if "op" not in r]
        data["rows"] += op_rows(data["rows"])
        write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))
        return 0
    held = "--held" in sys.argv[2:]
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    decode = "--decode" in sys.argv[2:]  # the decode state updates only
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    import mamba_ssm
    import triton

    env = environment("cuda") | {"mamba_ssm": mamba_ssm.__version__, "triton": triton.__version__}
    method = ("torch.profiler kernel durations (median of 5 calls) and CUDA events around each "
              "call (median of 20)")  # fmt: skip
    data = {"env": env, "kind": "ssd_kernels", "method": method, "rows": []}
    name = ("ssd_decode" if decode else "ssd_kernels") + ("_held" if held else "")
    path = out / f"{name}.json"
    if held:
        data["split"] = "held-out"  # measured to check the model: no fit reads its rows
    torch.manual_seed(0)
    for shape in () if decode else HELD_SHAPES if held else SHAPES:
        if only and shape[0] not in only:
            continue
        data["rows"] += _scan_rows(torch, *shape)
        torch.cuda.empty_cache()
        write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))
        print(f"{shape[0]}: done", flush=True)
    updates = (HELD_DECODE if decode else ()) if held else DECODE_SHAPES
    for shape in updates:
        if only and shape[0] not in only:
            continue
        data["rows"] += _decode_rows(torch, *shape)
        write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))
    data["rows"] += op_rows(data["rows"])
    write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
