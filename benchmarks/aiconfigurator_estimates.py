"""aiconfigurator's own TTFT/TPOT estimates for the rows of aiconfigurator_silicon_dense.csv.

Needs aiconfigurator 0.10.0, in a venv of its own (not the project's .venv):

    python3 -m venv /tmp/aicenv
    /tmp/aicenv/bin/pip install aiconfigurator==0.10.0 'pyarrow>=15,<22'
    /tmp/aicenv/bin/python benchmarks/aiconfigurator_estimates.py      # from the repo root

(Pin pyarrow because pip otherwise installs a pyarrow that needs NumPy 2, but aiconfigurator
pins numpy~=1.26, and aiconfigurator needs pyarrow to read its perf data.)

For each row this calls ``aiconfigurator.cli.api.cli_estimate(mode="agg", ...)``, the function
behind ``aiconfigurator cli estimate``. It runs one InferenceSession.run_agg for a fixed
configuration (no search), in the default SILICON database mode. The call gets the row's system,
backend, isl, osl, batch_size (the concurrency), tp/pp/attention-dp and gemm_quant_mode. An empty
gemm_quant_mode means the model's own default (bf16). The KV cache, FMHA and comm quant modes
are left at aiconfigurator's defaults, which are bf16/bf16/half for these configs.
ctx_tokens defaults to isl.
The perf database is the row's backend version if aiconfigurator ships it, otherwise the nearest
version it has, or its default (latest) when the row gives no version. The JSON records which
version was used. Writes benchmarks/data/aiconfigurator_estimates.json.
"""

import contextlib
import csv
import io
import json
import logging
import statistics
from collections import defaultdict
from pathlib import Path

from aiconfigurator.cli.api import cli_estimate
from aiconfigurator.sdk.perf_database import get_latest_database_version, get_supported_databases
from packaging.version import Version

DATA = Path(__file__).resolve().parent / "data"
SRC = DATA / "aiconfigurator_silicon_dense.csv"
OUT = DATA / "aiconfigurator_estimates.json"

# HF ids whose config.json aiconfigurator does not bundle (it would download them; this runs
# offline). Each maps to a bundled config of the same architecture. The FP8 checkpoint's row
# sets gemm_quant_mode=fp8 itself.
MODEL_ALIASES = {
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
}


def pick_version(system: str, backend: str, wanted: str) -> str:
    """The row's version if aiconfigurator has it, else the nearest one (by release number)."""
    have = get_supported_databases().get(system, {}).get(backend, [])
    if not wanted:
        return get_latest_database_version(system=system, backend=backend)
    if wanted in have:
        return wanted

    def release(v: str) -> int:
        major, minor, micro = (list(Version(v).release) + [0, 0])[:3]
        return major * 1_000_000 + minor * 1_000 + micro

    return min(have, key=lambda v: (abs(release(v) - release(wanted)), Version(v)))


def estimate(row: dict) -> dict:
    version = pick_version(row["system"], row["backend"], row["backend_version"])
    out = {"ttft_ms": None, "tpot_ms": None, "backend_version_used": version, "error": None}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            res = cli_estimate(
                model_path=MODEL_ALIASES.get(row["model_path"], row["model_path"]),
                system_name=row["system"],
                mode="agg",
                backend_name=row["backend"],
                backend_version=version,
                isl=int(row["isl"]),
                osl=int(row["osl"]),
                batch_size=int(row["batch_size"]),
                tp_size=int(row["tp_size"]),
                pp_size=int(row["pp_size"] or 1),
                attention_dp_size=int(row["attention_dp_size"] or 1),
                gemm_quant_mode=row["gemm_quant_mode"] or None,
            )
        out.update(ttft_ms=float(res.ttft), tpot_ms=float(res.tpot))
    except Exception as exc:  # e.g. aiconfigurator reports OOM: record why, keep going
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def main() -> None:
    logging.disable(logging.WARNING)
    with SRC.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    results = {row["id"]: estimate(row) for row in rows}
    OUT.write_text(
        json.dumps({"aiconfigurator_version": "0.10.0", "rows": results}, indent=1) + "\n"
    )

    ape = defaultdict(lambda: ([], []))
    for row in rows:
        est = results[row["id"]]
        if est["ttft_ms"] is None:
            continue
        for errs, key in zip(ape[row["backend"]], ("ttft", "tpot"), strict=True):
            silicon = float(row[f"silicon_{key}_ms"])
            errs.append(abs(est[f"{key}_ms"] - silicon) / silicon * 100)
    ok = sum(r["ttft_ms"] is not None for r in results.values())
    print(f"{ok}/{len(rows)} rows estimated -> {OUT}")
    for backend, (ttft, tpot) in sorted(ape.items()):
        print(
            f"{backend:7s} n={len(ttft):4d}  TTFT MdAPE {statistics.median(ttft):6.1f}%  "
            f"TPOT MdAPE {statistics.median(tpot):6.1f}%"
        )


if __name__ == "__main__":
    main()
