"""Kernels timed as the sweeps time them against the same kernels under a training step's
sustained load: is the GPU slower after seconds of back-to-back fp8 (or bf16) work?

    python3 benchmarks/device/power_probe.py OUT_DIR [--seconds 12] [--layer-seconds 45]

gpuperf's kernel parameters come from sweeps (gpuperf.measure.timing: 25 ms of warm-up, 100 ms
of repeats, the L2 flushed before each call) and its sustained clock from Llama-2-7B bf16 runs.
A training step keeps the tensor cores busy for seconds to minutes with no gaps. This probe
measures, for a few GEMMs and for a Llama-2-7B layer's training work (fp8 GEMMs through
torch._scaled_mm for forward, data and weight gradients, with the casts and transposes they
need; cuDNN flash attention forward and backward; the pointwise ops), each op's time three ways:
- `sweep`: gpuperf's own timer on an idle, rested GPU (as the calibration sweeps ran);
- `first`: the first 0.3 s of back-to-back work after a rest;
- `steady`: the last third of `--seconds` (GEMMs) or `--layer-seconds` (layers) of it,
while a thread samples the SM clock, power, temperature and the clock-event reasons through
NVML every 50 ms. Reads clocks only; changes nothing on the GPU. Writes power_probe.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE))

from gpuperf.measure.kernels_gemm import FP8_MAX  # noqa: E402

T, H, FFN, HEADS, D = 4096, 4096, 11008, 32, 128  # Llama-2-7B, one 4096-token micro-batch
GEMMS = [  # (dtype, m, n, k): Y[m, n] = X[m, k] W[n, k]^T
    ("bf16", 8192, 8192, 8192),
    ("fp8", 8192, 8192, 8192),
    ("fp8", T, 3 * H, H),
    ("fp8", T, 2 * FFN, H),
    ("fp8", T, H, FFN),
    ("bf16", T, 2 * FFN, H),
]


class Sampler:
    """NVML samples every 50 ms on a thread: SM clock, power, temperature, clock-event reasons."""

    def __init__(self, pynvml, handle) -> None:  # noqa: ANN001
        self.nv, self.h, self.rows, self.t0 = pynvml, handle, [], time.perf_counter()
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        nv, h = self.nv, self.h
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = reasons or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        while not self.stop.is_set():
            self.rows.append({
                "t_s": time.perf_counter() - self.t0,
                "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000,
                "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "reasons": int(reasons(h)),
            })  # fmt: skip
            time.sleep(0.05)

    def __enter__(self) -> Sampler:
        self.t0 = time.perf_counter()
        self.th.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.th.join()

    def window(self, lo: float, hi: float) -> dict:
        rs = [r for r in self.rows if lo <= r["t_s"] <= hi] or self.rows[-1:]
        reasons = 0
        for r in rs:
            reasons |= r["reasons"]
        return {
            "sm_mhz": statistics.median(r["sm_mhz"] for r in rs),
            "power_w": statistics.median(r["power_w"] for r in rs),
            "temp_c": max(r["temp_c"] for r in rs),
            "reasons_or": reasons,
        }


class Layer:
    """A Llama-2-7B block's training work on one micro-batch, op by op, each op timed by its own
    event pair. fp8: every GEMM (forward, dgrad, wgrad) through _scaled_mm on e4m3 operands, with
    the casts and transposes Transformer Engine's cast_transpose makes; bf16: plain matmuls."""

    def __init__(self, torch, dtype: str) -> None:  # noqa: ANN001
        self.torch, self.dtype = torch, dtype
        bf = torch.bfloat16
        self.x = torch.randn(T, H, device="cuda", dtype=bf)
        self.w = {
            "qkv": torch.randn(3 * H, H, device="cuda", dtype=bf) * 0.02,
            "out": torch.randn(H, H, device="cuda", dtype=bf) * 0.02,
            "gate_up": torch.randn(2 * FFN, H, device="cuda", dtype=bf) * 0.02,
            "down": torch.randn(H, FFN, device="cuda", dtype=bf) * 0.02,
        }
        self.norm_w = torch.ones(H, device="cuda", dtype=bf)
        self.ops: dict[str, list] = {}
        self.wq = {}
        if dtype == "fp8":  # weights cast once a step (TE caches them over micro-batches)
            for name, w in self.w.items():
                q, s = self._quant(w)
                self.wq[name] = (q, q.t().contiguous(), s)  # [n, k] and [k, n] row-major

    def _timed(self, name: str, fn):  # noqa: ANN001, ANN202
        torch = self.torch
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        out = fn()
        e.record()
        self.ops.setdefault(name, []).append((s, e))
        return out

    def _quant(self, t):  # noqa: ANN001, ANN202
        torch = self.torch
        s = (t.abs().amax().float() / FP8_MAX).reshape(())
        return (t / s).to(torch.float8_e4m3fn), s

    def _smm(self, a, b, sa, sb):  # noqa: ANN001, ANN202
        torch = self.torch
        return torch._scaled_mm(
            a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True
        )

    def _mm(self, name: str, a, b_name: str):  # noqa: ANN001, ANN202
        """Forward Y = A W^T."""
        if self.dtype == "bf16":
            return self._timed(name, lambda: a @ self.w[b_name].t())
        aq, sa = self._timed(name + ".quant", lambda: self._quant(a))
        wq, _, sw = self.wq[b_name]
        return self._timed(name, lambda: self._smm(aq, wq.t(), sa, sw))

    def _mm_bwd(self, name: str, dy, x):  # noqa: ANN001, ANN202
        """dX = dY W and dW = dY^T X."""
        if self.dtype == "bf16":
            dx = self._timed(name + ".dgrad", lambda: dy @ self.w[name])
            self._timed(name + ".wgrad", lambda: dy.t() @ x)
            return dx
        dyq, sdy = self._timed(name + ".dy_quant", lambda: self._quant(dy))
        dyt = self._timed(name + ".dy_transpose", lambda: dyq.t().contiguous())
        xq, sx = self._quant(x)  # the forward's cast_transpose made X^T: not timed again here
        xt = xq.t().contiguous()
        _, wt, sw = self.wq[name]
        dx = self._timed(name + ".dgrad", lambda: self._smm(dyq, wt.t(), sdy, sw))
        self._timed(name + ".wgrad", lambda: self._smm(dyt, xt.t(), sdy, sx))
        return dx

    def step(self) -> None:
        torch = self.torch
        F = torch.nn.functional
        x = self.x
        h1 = self._timed("attn_norm", lambda: F.rms_norm(x, (H,), self.norm_w))
        qkv = self._mm("qkv", h1, "qkv")
        q, k, v = (t.view(1, T, HEADS, D).transpose(1, 2) for t in qkv.split(H, dim=1))
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        with torch.enable_grad():
            o = self._timed("attn", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        o2 = o.detach().transpose(1, 2).reshape(T, H)
        a = self._mm("out", o2, "out")
        x2 = self._timed("residual", lambda: x + a)
        h2 = self._timed("mlp_norm", lambda: F.rms_norm(x2, (H,), self.norm_w))
        gu = self._mm("gate_up", h2, "gate_up")
        g, u = gu.split(FFN, dim=1)
        act = self._timed("silu_mul", lambda: F.silu(g) * u)
        self._mm("down", act, "down")
        dy = torch.randn_like(x) * 1e-2
        dact = self._mm_bwd("down", dy, act)

        def silu_mul_bwd():  # noqa: ANN202
            sg = torch.sigmoid(g)
            return torch.cat([dact * u * sg * (1 + g * (1 - sg)), dact * F.silu(g)], 1)

        dgu = self._timed("silu_mul.bwd", silu_mul_bwd)
        self._mm_bwd("gate_up", dgu, h2)
        do = self._mm_bwd("out", dy, o2).view(1, T, HEADS, D).transpose(1, 2)
        grads = self._timed("attn.bwd", lambda: torch.autograd.grad(o, (q, k, v), do))
        dqkv = torch.cat([g_.transpose(1, 2).reshape(T, H) for g_ in grads], 1)
        self._mm_bwd("qkv", dqkv, h1)

    def times(self, since: int = 0) -> dict[str, float]:
        self.torch.cuda.synchronize()
        return {
            name: statistics.median(s.elapsed_time(e) for s, e in evs[since:])
            for name, evs in self.ops.items()
        }


def sustained(torch, fn, seconds: float, sampler: Sampler, block: int):  # noqa: ANN001, ANN201
    """fn back to back for `seconds`: per-call times of the first 0.3 s and the last third."""
    rows = []  # (t_since_start, ms per call)
    t_start = time.perf_counter() - sampler.t0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(block):
            fn()
        e.record()
        e.synchronize()
        rows.append((time.perf_counter() - sampler.t0 - t_start, s.elapsed_time(e) / block))
    first = [ms for t, ms in rows if t <= 0.3] or [rows[0][1]]
    steady = [ms for t, ms in rows if t >= seconds * 2 / 3]
    return (statistics.median(first), statistics.median(steady), t_start,
            [round(ms, 5) for _, ms in rows])  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--layer-seconds", type=float, default=45.0)
    ap.add_argument("--rest", type=float, default=5.0)
    a = ap.parse_args()
    import e2e_hf
    import pynvml
    import torch

    from gpuperf.measure.kernels_gemm import build
    from gpuperf.measure.timing import time_fn
    from gpuperf.workloads import single_op as so

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    res: dict = {
        "env": e2e_hf.env_stamp(),
        "kind": "power_probe",
        "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
        "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
        "gemms": [],
        "layers": [],
    }
    out = a.out_dir / "power_probe.json"
    a.out_dir.mkdir(parents=True, exist_ok=True)
    with Sampler(pynvml, h) as sampler:
        for dtype, m, n, k in GEMMS:
            # the kernel the calibration sweeps run (torch.matmul, or _scaled_mm per-tensor)
            fn = build(so.gemm(m, n, k, dtype=dtype), "cuda", torch).run
            fn()
            torch.cuda.synchronize()
            time.sleep(a.rest)
            sweep = time_fn(fn, "cuda").median_s * 1e3
            time.sleep(a.rest)
            first, steady, t0, trace = sustained(torch, fn, a.seconds, sampler, block=20)
            w = sampler.window(t0 + a.seconds * 2 / 3, t0 + a.seconds)
            row = {"dtype": dtype, "m": m, "n": n, "k": k, "sweep_ms": sweep, "first_ms": first,
                   "steady_ms": steady, "steady_over_sweep": steady / sweep,
                   "tflops_steady": 2 * m * n * k / steady / 1e9, "steady_nvml": w,
                   "first_nvml": sampler.window(t0, t0 + 0.3), "trace_ms": trace}  # fmt: skip
            res["gemms"].append(row)
            print(f"{dtype} {m}x{n}x{k}: sweep {sweep:.4f} first {first:.4f} steady {steady:.4f} "
                  f"ms ({steady / sweep:.3f}x) {w}", flush=True)  # fmt: skip
            del fn
            torch.cuda.empty_cache()
        for dtype in ("fp8", "bf16"):
            layer = Layer(torch, dtype)
            for _ in range(3):
                layer.step()
            torch.cuda.synchronize()
            time.sleep(a.rest)
            # sweep-style: each op alone under gpuperf's timer is what the sweeps measure; here
            # the whole layer is first run for ~0.3 s right after the rest, then sustained.
            layer.ops.clear()
            t0 = time.perf_counter() - sampler.t0
            n_first = 0
            while time.perf_counter() - sampler.t0 - t0 < 0.3:
                layer.step()
                n_first += 1
                torch.cuda.synchronize()
            first = layer.times()
            layer.ops.clear()
            end = time.perf_counter() + a.layer_seconds
            marks = []
            while time.perf_counter() < end:
                layer.step()
                marks.append(time.perf_counter() - sampler.t0)
                if len(marks) % 20 == 0:
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
            cut = next(i for i, t in enumerate(marks) if t - marks[0] >= a.layer_seconds * 2 / 3)
            steady = layer.times(since=cut)
            w = sampler.window(marks[cut], marks[-1])
            res["layers"].append({
                "dtype": dtype, "tokens": T, "first_ms": first, "steady_ms": steady,
                "first_sum_ms": sum(first.values()), "steady_sum_ms": sum(steady.values()),
                "steps_first": n_first, "steps_sustained": len(marks), "steady_nvml": w,
                "first_nvml": sampler.window(t0, t0 + 0.3)})  # fmt: skip
            print(f"layer {dtype}: first {sum(first.values()):.3f} steady "
                  f"{sum(steady.values()):.3f} ms {w}", flush=True)  # fmt: skip
            del layer
            torch.cuda.empty_cache()
    res["samples"] = sampler.rows
    out.write_text(json.dumps(res, indent=1))
    print("| case | sweep/first (ms) | steady (ms) | steady/first | SM MHz | W | °C |")
    for r in res["gemms"]:
        s = r["steady_nvml"]
        print(f"| {r['dtype']} {r['m']}x{r['n']}x{r['k']} | {r['sweep_ms']:.4f} | "
              f"{r['steady_ms']:.4f} | {r['steady_over_sweep']:.3f} | {s['sm_mhz']} | "
              f"{s['power_w']:.0f} | {s['temp_c']} |")  # fmt: skip
    for r in res["layers"]:
        s = r["steady_nvml"]
        print(f"| layer {r['dtype']} | {r['first_sum_ms']:.3f} | {r['steady_sum_ms']:.3f} | "
              f"{r['steady_sum_ms'] / r['first_sum_ms']:.3f} | {s['sm_mhz']} | "
              f"{s['power_w']:.0f} | {s['temp_c']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
