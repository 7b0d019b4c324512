"""Host cost of the PyTorch ops an eager MoE layer issues, on the GPU machine's CPU.

    python3 benchmarks/device/host_op_probe.py OUT_DIR

Each op is called `n` times back to back on small CUDA tensors (the GPU keeps up, so the time is
the host's: Python, the dispatcher, TensorIterator, allocation and the launches the op makes)
and once more under torch.profiler to count the kernels (and memsets) one call launches. Writes
host_op_probe.json: per op, host µs per call, kernels per call, and the ratio of its host µs to
a one-kernel add's. gpuperf charges each op host_dispatch_s × that ratio per kernel it predicts
(gpuperf.step.cost); the ratios belong to PyTorch's code, the absolute cost to the CPU.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path


def ops(torch):  # noqa: ANN001, ANN201
    dev, bf = "cuda", torch.bfloat16
    E, k, h, f = 128, 8, 2048, 768

    def routed(tokens: int):  # noqa: ANN202
        s = tokens * k
        ids = torch.randint(0, E, (s,), device=dev)
        return s, ids

    out = {}
    x = torch.randn(64, 64, device=dev, dtype=bf)
    out["add"] = lambda: x.add(1.0)
    out["mul"] = lambda: x * x
    w = torch.randn(64, 64, device=dev, dtype=bf)
    out["linear"] = lambda: torch.nn.functional.linear(x, w)
    for tokens in (1, 2048):
        s, ids = routed(tokens)
        hs = torch.randn(tokens, h, device=dev, dtype=bf)
        logits = torch.randn(tokens, E, device=dev, dtype=bf)
        perm = torch.argsort(ids)
        mask = (ids >= E).unsqueeze(-1)
        rows = torch.randn(s, h, device=dev, dtype=bf)
        sfx = f"_t{tokens}"
        out["sort" + sfx] = lambda ids=ids: torch.sort(ids)
        out["index_gather" + sfx] = lambda hs=hs, perm=perm: hs[perm // k]
        out["index_put" + sfx] = lambda perm=perm: torch.empty_like(perm).__setitem__(
            perm, torch.arange(perm.numel(), device=dev)
        )
        out["histc" + sfx] = lambda ids=ids: torch.histc(ids.int(), bins=E, min=0, max=E - 1)
        out["cumsum" + sfx] = lambda: torch.cumsum(torch.ones(E, device=dev), 0, dtype=torch.int32)
        out["topk" + sfx] = lambda logits=logits: torch.topk(logits, k, dim=-1)
        out["softmax_f32" + sfx] = lambda lg=logits: torch.softmax(lg, -1, dtype=torch.float)
        out["masked_fill" + sfx] = lambda rows=rows, mask=mask: rows.masked_fill(mask, 0.0)
        out["compare" + sfx] = lambda ids=ids: ids >= E
        if hasattr(torch, "_grouped_mm"):
            offs = torch.cumsum(torch.bincount(ids, minlength=E), 0).to(torch.int32)
            wg = torch.randn(E, 2 * f, h, device=dev, dtype=bf).transpose(-2, -1)
            out["grouped_mm" + sfx] = lambda rows=rows, wg=wg, offs=offs: torch._grouped_mm(
                rows, wg, offs=offs
            )
    return out


def host_us(fn, n: int, torch) -> float:  # noqa: ANN001
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def kernels(fn, torch) -> int:  # noqa: ANN001
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(
        e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA
    )


def main() -> int:
    import torch

    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(),
           "cpu": platform.processor() or platform.machine()}  # fmt: skip
    rows = []
    table = ops(torch)
    base = host_us(table["add"], 2000, torch)
    for name, fn in table.items():
        us = host_us(fn, 300 if "grouped" in name or "t2048" in name else 2000, torch)
        row = {"op": name, "host_us": us, "kernels": kernels(fn, torch), "ratio_to_add": us / base}
        rows.append(row)
        print(f"{name:24s} {us:8.2f} us/call  {row['kernels']:2d} kernels  x{us / base:5.2f}",
              flush=True)  # fmt: skip
    (out_dir / "host_op_probe.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
