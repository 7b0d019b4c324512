"""The collectives the measured plans issue, at the sizes they issue them, beside
`gpuperf predict allreduce ...` for the same sizes and ranks. Run from the repository root:

    python3 benchmarks/device/plan_collectives.py OUT_DIR --nproc 2,4

Sizes (bf16): tensor-parallel all-reduces of one layer's activations (8 tokens × 4096 in decode,
2048 × 4096 and 2048 × 8192 in prefill), the gathered logits of an 8-sequence decode step
(8 × 128256), PyTorch DDP's 25 MiB bucket, and FSDP2's per-layer all-gather and reduce-scatter of
a 1.1B (TinyLlama) and an 8B (Llama-3-8B) layer. Writes OUT_DIR/plancoll_<n>gpu.json (rows as
gpuperf measure --save writes them, each with its prediction) as each collective finishes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuperf.errors import GpuperfError  # noqa: E402
from gpuperf.measure import coll_report  # noqa: E402
from gpuperf.measure.collectives import Launch, run_collective  # noqa: E402
from gpuperf.measure.results import ResultsFile  # noqa: E402

BF16 = 2
LAYER_1B = 2048 * (2048 + 2 * 256) + 2048 * 2048 + 3 * 2048 * 5632 + 2 * 2048  # params
LAYER_8B = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
SIZES = {
    "allreduce": [8 * 4096 * BF16, 2048 * 4096 * BF16, 2048 * 8192 * BF16, 25 * 2**20],
    "allgather": [8 * 128256 * BF16, LAYER_1B * BF16, LAYER_8B * BF16],
    "reducescatter": [LAYER_1B * BF16, LAYER_8B * BF16],
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--nproc", default="2,4")
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    spec = None
    if a.device == "cuda":
        from gpuperf.hardware.detect import detect_gpu

        spec = detect_gpu(0)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    for n in (int(x) for x in a.nproc.split(",")):
        saver: list[ResultsFile] = []
        path = a.out_dir / f"plancoll_{n}gpu.json"
        for coll, sizes in SIZES.items():
            warnings: list[str] = []
            predict = coll_report.predictor(spec, None, warnings)

            def on_row(env, raw, predict=predict, saver=saver, path=path, coll=coll, n=n):  # noqa: ANN001
                row = coll_report.finish_row(raw, predict)
                if not saver:
                    saver.append(ResultsFile(path, env, "plan collectives"))
                saver[0].add(row)
                pred = "-" if row["time_us"] is None else f"{row['time_us']:.1f}"
                print(f"{coll:14s} x{n} {row['bytes']:12d} B {row['measured_us']:10.1f} us "
                      f"(predicted {pred})", flush=True)  # fmt: skip

            try:
                launch = Launch(nproc=n, device=a.device)
                run_collective(coll, sorted(sizes), launch, warmup_ms=5.0, rep_ms=30.0,
                               timeout_s=120.0, on_row=on_row)  # fmt: skip
            except GpuperfError as exc:
                failures += 1
                print(f"{coll} x{n}: FAILED: {exc}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
