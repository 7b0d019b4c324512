"""Fit the engine profiles' host time per step (step_overhead, per_seq, per_kv_token) on
part of the serving runs, and report every run, fit and held out, measured beside simulated.

hf: the Hugging Face continuous-batching runs measured here (benchmarks/results/<gpu>/
serve_hf.json, from benchmarks/device/serve_hf.py): each run's requests replayed with its cache
size, token budget and request cap. FIT_RUNS are fitted, the others held out. The GPU time of
each step is the step engine's (calibrated kernels); only the host terms are fitted.

    .venv/bin/python benchmarks/fit_serve.py [--gpu h100-sxm5-80gb] [--public]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from gpuperf.measure.serve_hf import metrics, replay

RESULTS = Path(__file__).parent / "results"
FIT_RUNS = ("llama3.2-1b_n16_512x128", "llama3.2-1b_n64_512x128", "llama3.2-1b_n256_256x256",
            "llama3-8b_n16_512x128", "llama3-8b_n64_2048x64",
            "llama3.2-1b_n64_512x128_graphs")  # fmt: skip
COMPARED = ("wall_s", "ttft_p50_ms", "tpot_p50_ms")
# The serving runs of each GPU's folder that the track record reports (gpuperf.step.track_record;
# the probes, which change the model or time single SDPA calls, are not among them), and the
# one file the FIT_RUNS of which were fitted.
HELD_FILES = ("serve_hf.json", "serve_hf_run2.json", "serve_hf_closed.json",
              "serve_hf_families.json", "serve_hf_families2.json",
              "serve_hf_families3.json")  # fmt: skip
FITTED = ("h100-sxm5-80gb", "serve_hf.json")
PARAMS = ("step_overhead", "eager_step", "per_seq", "per_kv_token")
GPU_NAMES = {"h100-sxm5-80gb": "h100", "h200-sxm-141gb": "h200"}


def hf_params() -> dict[str, float]:
    """The hf profile's host terms (PARAMS), as it ships."""
    from gpuperf.step.serve_engines import load_engine

    hf = load_engine("hf")
    return {k: getattr(hf, k) for k in PARAMS}


def measured(run: dict) -> dict[str, float]:
    return {k: v for k, v in metrics(run["requests"]).items() if k in COMPARED}


def simulate(run: dict, gpu: str, params: dict[str, float]) -> dict[str, float]:
    model = run["preset"]
    if model is None:  # a family without a preset: the config the run built its model from
        from gpuperf.workloads.hf_config import from_hf_dict

        model = from_hf_dict(run["config"], name=run["label"].split("_")[0])
    if "sliding_window" in run and not run["sliding_window"]:  # served with the window removed
        from dataclasses import replace

        from gpuperf.workloads.config import load_model

        model = replace(load_model(model), sliding_window=0, sliding_layers=())
    s = replay(run, model, gpu, **params).summary
    return {k: s[k] for k in COMPARED}


def loss(runs: list[dict], gpu: str, params: dict[str, float]) -> float:
    out = []
    for run in runs:
        m, p = measured(run), simulate(run, gpu, params)
        out += [abs(math.log(p[k] / m[k])) for k in m]
    return statistics.fmean(out)


def fit(runs: list[dict], gpu: str, start: dict[str, float]) -> dict[str, float]:
    """Coordinate search on a log scale (each parameter x or / by a shrinking factor)."""
    best, best_loss = dict(start), loss(runs, gpu, start)
    factor = 4.0
    while factor > 1.05:
        improved = False
        for k in PARAMS:
            for f in (factor, 1 / factor):
                trial = {**best, k: best[k] * f}
                val = loss(runs, gpu, trial)
                if val < best_loss:
                    best, best_loss, improved = trial, val, True
        if not improved:
            factor = math.sqrt(factor)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="h100-sxm5-80gb")
    ap.add_argument("--file", default="serve_hf.json", help="results file under the GPU's folder")
    ap.add_argument(
        "--no-fit",
        action="store_true",
        help="every run held out, with the hf profile's parameters as they are",
    )
    ap.add_argument(
        "--public",
        action="store_true",
        help="fit the vllm and trtllm profiles on the public sample instead",
    )
    args = ap.parse_args()
    if args.public:
        import sys

        sys.path.insert(0, str(Path(__file__).parent))
        for engine in ("vllm", "trtllm"):
            fit_public(engine)
        return
    data = json.loads((RESULTS / args.gpu / args.file).read_text())
    gpu = GPU_NAMES.get(args.gpu, args.gpu)
    runs = [r for r in data["runs"] if not r.get("error")]
    fit_runs = [r for r in runs if r["label"] in FIT_RUNS]
    params = hf_params()
    if args.no_fit:
        fit_runs = []
    else:
        params = fit(fit_runs, gpu, params)
    print(
        "fitted:" if fit_runs else "the hf profile's:",
        ", ".join(f"{k} = {v:.3g}" for k, v in params.items()),
    )
    print(f"{'run':38s} {'':5s} {'wall s':>15s} {'TTFT p50 ms':>19s} {'TPOT p50 ms':>17s}")
    errs: dict[str, list[float]] = {"fit": [], "held out": []}
    for run in data["runs"]:
        if run.get("error"):
            continue
        m, p = measured(run), simulate(run, gpu, params)
        split = "fit" if run in fit_runs else "held out"
        cells = []
        for k in ("wall_s", "ttft_p50_ms", "tpot_p50_ms"):
            e = 100 * (p[k] / m[k] - 1)
            errs[split].append(abs(e))
            cells.append(f"{m[k]:8.1f} {e:+6.1f}%")
        print(f"{run['label']:38s} {split[:4]:5s} " + "  ".join(cells))
    for split, e in errs.items():
        if e:
            print(f"{split}: median |error| {statistics.median(e):.1f}% over {len(e)} numbers")


def held_out(gpu_dir: Path) -> dict[str, list[float]]:
    """Each compared metric's errors (prediction / measurement - 1) over the folder's serving
    runs that no fit used, with the hf profile as it is."""
    params = hf_params()
    out: dict[str, list[float]] = {k: [] for k in COMPARED}
    for name in HELD_FILES:
        path = gpu_dir / name
        if not path.exists():
            continue
        fitted = FIT_RUNS if (gpu_dir.name, name) == FITTED else ()
        for run in json.loads(path.read_text())["runs"]:
            if run.get("error") or run.get("label") in fitted:
                continue
            m, p = measured(run), simulate(run, gpu_dir.name, params)
            for k in COMPARED:
                out[k].append(p[k] / m[k] - 1)
    return out


def fit_public(engine: str, every: int = 3) -> dict[str, float]:
    """vllm / trtllm: step_overhead and per_seq from the TPOT of the fit half of the public
    aiconfigurator rows of that engine (benchmarks/serve_public.py, each row under its client;
    every k-th row for speed). TTFT is left out: for most rows it depends on a benchmark client
    the sample does not record."""
    import serve_public as sp

    from gpuperf.step.serve_engines import load_engine

    rows = [r for r in sp.rows() if sp.half(r) == "fit" and sp.ENGINES[r["backend"]] == engine
            and r["backend"] == engine][::every]  # fmt: skip
    prof = load_engine(engine)

    def loss_of(params: dict[str, float]) -> float:
        errs = []
        for r in rows:
            try:
                _, tpot = sp.predict(r, **params)
            except Exception:  # noqa: BLE001 (rows gpuperf refuses do not count)
                continue
            errs.append(abs(math.log(tpot / float(r["silicon_tpot_ms"]))))
        return statistics.median(errs)

    best = {"step_overhead": prof.step_overhead, "per_seq": prof.per_seq}
    best_loss, factor = loss_of(best), 4.0
    while factor > 1.1:
        improved = False
        for k in best:
            for f in (factor, 1 / factor):
                trial = {**best, k: best[k] * f}
                val = loss_of(trial)
                if val < best_loss:
                    best, best_loss, improved = trial, val, True
        if not improved:
            factor = math.sqrt(factor)
    print(f"{engine}: {len(rows)} fit rows, median |log error| of TPOT {best_loss:.3f}:",
          ", ".join(f"{k} = {v:.3g}" for k, v in best.items()))  # fmt: skip
    return best


if __name__ == "__main__":
    main()
