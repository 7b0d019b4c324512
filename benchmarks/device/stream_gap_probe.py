"""The GPU's idle time between two kernels, launched eagerly on a busy stream and replayed from a
CUDA graph, over the same kernels.

    python3 benchmarks/device/stream_gap_probe.py OUT_DIR

gpuperf charges a replayed CUDA graph `graph_launch_s` of GPU idle per kernel (profiled decode
steps: ~0.6-0.7 µs on an H200) and an eager stream none once the GPU is the bottleneck, so a
GPU-bound step came out slower with CUDA graphs than without. This probe asks what the stream's
own gap is. Each sequence is 600 kernels long, each kernel long enough (>= 8 µs) that the host
queues launches faster than the GPU runs them:
- `mm2048`: x = x @ w, bf16 2048 x 2048 (dependent GEMMs, ~25 µs each);
- `mm2048+add`: the same GEMM, then x += b (a ~3 µs elementwise kernel) after each;
- `add8M`: x += y over 8M bf16 elements (~12 µs each);
- `mm1024x4+add`: four 1024² GEMMs (~5 µs each, dependent) then an add, repeated.
For each: the host's time per launch (perf_counter over the loop, no sync); the wall time of the
eager loop and of the captured graph's replay (CUDA events, median of 7); the kernels' own
durations summed from torch.profiler over one eager pass and one replay. The gap per kernel is
(wall - kernels' time) / kernels. Writes stream_gap_probe.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_hf import time_iters  # noqa: E402  (this folder)
from train_kernels_probe import kernel_calls  # noqa: E402

N = 600  # kernels per sequence (about)
REPS = 7


def main() -> int:
    import torch

    from gpuperf.fileio import write_text
    from gpuperf.measure.env import environment

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir", type=Path)
    out = ap.parse_args().out_dir
    out.mkdir(parents=True, exist_ok=True)
    dev = "cuda"
    bf = torch.bfloat16
    torch.manual_seed(0)
    w2 = torch.randn(2048, 2048, device=dev, dtype=bf) / 45.0
    w1 = torch.randn(1024, 1024, device=dev, dtype=bf) / 32.0
    b2 = torch.randn(2048, 2048, device=dev, dtype=bf) * 1e-3
    b1 = torch.randn(1024, 1024, device=dev, dtype=bf) * 1e-3
    big_x = torch.randn(8 << 20, device=dev, dtype=bf)
    big_y = torch.randn(8 << 20, device=dev, dtype=bf) * 1e-3

    def seq_mm(x: torch.Tensor) -> torch.Tensor:
        for _ in range(N):
            x = x @ w2
        return x

    def seq_mm_add(x: torch.Tensor) -> torch.Tensor:
        for _ in range(N // 2):
            x = x @ w2
            x += b2
        return x

    def seq_add(x: torch.Tensor) -> torch.Tensor:
        for _ in range(N):
            x += big_y
        return x

    def seq_small(x: torch.Tensor) -> torch.Tensor:
        for _ in range(N // 5):
            for _ in range(4):
                x = x @ w1
            x += b1
        return x

    cases = (
        ("mm2048", seq_mm, lambda: torch.randn(2048, 2048, device=dev, dtype=bf)),
        ("mm2048+add", seq_mm_add, lambda: torch.randn(2048, 2048, device=dev, dtype=bf)),
        ("add8M", seq_add, lambda: big_x.clone()),
        ("mm1024x4+add", seq_small, lambda: torch.randn(1024, 1024, device=dev, dtype=bf)),
    )

    def wall_ms(fn) -> float:  # noqa: ANN001
        return statistics.median(time_iters(fn, REPS, warmup=0))

    def kernels(fn) -> tuple[int, float]:  # noqa: ANN001
        """The kernels one call runs and their summed duration (ms), from the profiler."""
        durs = [us for _, us in kernel_calls(torch, fn, calls=1)[0]]
        return len(durs), sum(durs) / 1e3  # us -> ms

    rows = []
    for name, seq, make in cases:
        x0 = make()  # seq never writes x0 but in add8M, where the values only drift
        with torch.no_grad():
            for _ in range(3):
                seq(x0)
            torch.cuda.synchronize()
            hosts = []
            for _ in range(REPS):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                seq(x0)
                hosts.append(time.perf_counter() - t0)
                torch.cuda.synchronize()
            eager_ms = wall_ms(lambda seq=seq, x0=x0: seq(x0))
            n_eager, k_eager = kernels(lambda seq=seq, x0=x0: seq(x0))
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    seq(x0)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                seq(x0)
            for _ in range(3):
                graph.replay()
            graph_ms = wall_ms(graph.replay)
            n_graph, k_graph = kernels(graph.replay)
        row = {
            "case": name,
            "kernels_eager": n_eager,
            "kernels_graph": n_graph,
            "host_us_per_launch": 1e6 * statistics.median(hosts) / max(1, n_eager),
            "eager_ms": eager_ms,
            "graph_ms": graph_ms,
            "kernel_sum_eager_ms": k_eager,
            "kernel_sum_graph_ms": k_graph,
            "kernel_us_eager": 1e3 * k_eager / max(1, n_eager),
            "gap_us_eager": 1e3 * (eager_ms - k_eager) / max(1, n_eager),
            "gap_us_graph": 1e3 * (graph_ms - k_graph) / max(1, n_graph),
        }
        rows.append(row)
        print(
            f"{name:14s} kernels {n_eager}/{n_graph}  host {row['host_us_per_launch']:.2f} "
            f"us/launch  kernel {row['kernel_us_eager']:.2f} us  eager {eager_ms:.3f} ms "
            f"graph {graph_ms:.3f} ms  gap eager {row['gap_us_eager']:.3f} us graph "
            f"{row['gap_us_graph']:.3f} us",
            flush=True,
        )
    data = {"env": environment(dev), "kind": "stream_gap_probe", "n": N, "reps": REPS,
            "rows": rows}  # fmt: skip
    write_text(out / "stream_gap_probe.json", json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
