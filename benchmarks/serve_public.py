"""gpuperf serve against the public aiconfigurator sample (benchmarks/data/
aiconfigurator_silicon_dense.csv): measured TTFT and TPOT of vLLM, SGLang and TRT-LLM
deployments (aggregated, dense models, H100/H200/B200), each row a closed loop of `batch_size`
users sending fixed-length requests (three waves of requests per row).

Rows split in two by a hash of their id: the fit half sets the engine profiles' host time per
step (benchmarks/fit_serve.py), the held-out half is reported. SGLang rows run on the vLLM-like
profile. aiconfigurator's own estimate of the same rows (benchmarks/data/
aiconfigurator_estimates.json, from benchmarks/aiconfigurator_estimates.py) is printed beside.

    .venv/bin/python benchmarks/serve_public.py [--half fit|held|all] [--limit N]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import zlib
from pathlib import Path

DATA = Path(__file__).parent / "data"
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama3-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama3-8b",
    "meta-llama/Llama-3.1-70B": "llama3-70b",
    "Qwen/Qwen3-32B": "qwen3-32b",
}
GPUS = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200"}
ENGINES = {"vllm": "vllm", "sglang": "vllm", "trtllm": "trtllm"}
WAVES = 3
TARGET = 15.0  # median |error| %, TTFT and TPOT


def rows() -> list[dict[str, str]]:
    with open(DATA / "aiconfigurator_silicon_dense.csv") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def half(row: dict[str, str]) -> str:
    return "fit" if zlib.crc32(row["id"].encode()) % 2 == 0 else "held"


def predict(row: dict[str, str], **engine_options: float) -> tuple[float, float]:
    """gpuperf's median TTFT and TPOT (ms) of the row's deployment."""
    from gpuperf import api

    users = int(row["batch_size"])
    fp8 = row["gemm_quant_mode"] in ("fp8", "fp8_block")
    rep = api.serve(
        MODELS[row["model_path"]], gpu=GPUS[row["system"]], engine=ENGINES[row["backend"]],
        tp=int(row["tp_size"]), isl=int(row["isl"]), osl=int(row["osl"]),
        concurrency=users, requests=WAVES * users, dtype="fp8" if fp8 else "bf16",
        **engine_options,
    )  # fmt: skip
    return rep.summary["ttft_p50_ms"], rep.summary["tpot_p50_ms"]


def err(pred: float, real: float) -> float:
    return 100 * (pred - real) / real


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--half", choices=("fit", "held", "all"), default="held")
    ap.add_argument("--limit", type=int, default=0, help="every k-th row only (speed)")
    args = ap.parse_args()
    est_path = DATA / "aiconfigurator_estimates.json"
    aic = json.loads(est_path.read_text())["rows"] if est_path.exists() else {}
    sel = [r for r in rows() if args.half == "all" or half(r) == args.half]
    if args.limit:
        sel = sel[:: args.limit]
    groups: dict[str, list[tuple[float, float, float | None, float | None]]] = {}
    for r in sel:
        try:
            ttft, tpot = predict(r)
        except Exception as exc:  # noqa: BLE001 (a row gpuperf refuses is reported, not fatal)
            print(f"skip {r['id']}: {exc}")
            continue
        a = aic.get(r["id"], {})
        real_ttft, real_tpot = float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"])
        a_ttft = err(a["ttft_ms"], real_ttft) if a.get("ttft_ms") else None
        a_tpot = err(a["tpot_ms"], real_tpot) if a.get("tpot_ms") else None
        key = f"{r['backend']:6s} {r['system']}"
        groups.setdefault(key, []).append((err(ttft, real_ttft), err(tpot, real_tpot), a_ttft,
                                           a_tpot))  # fmt: skip
    print(f"{args.half} rows: median |error| % (signed median), gpuperf vs aiconfigurator "
          f"(target <= {TARGET:.0f}%)")  # fmt: skip
    every = []
    for key in sorted(groups):
        every += groups[key]
        _line(key, groups[key])
    _line("all", every)


def _line(key: str, g: list) -> None:
    def med(i: int, signed: bool = False) -> str:
        vals = [x[i] for x in g if x[i] is not None]
        if not vals:
            return "   -  "
        m = statistics.median(vals if signed else [abs(v) for v in vals])
        return f"{m:+6.1f}" if signed else f"{m:6.1f}"

    print(f"{key:18s} n={len(g):4d}  TTFT {med(0)} ({med(0, True)})  TPOT {med(1)} "
          f"({med(1, True)})   aiconfigurator TTFT {med(2)}  TPOT {med(3)}")  # fmt: skip


if __name__ == "__main__":
    main()
