"""Prediction accuracy against every committed measurement (benchmarks/results/<gpu>/*.json).

    python benchmarks/accuracy.py [--results DIR] [--markdown] [--detail CLASS]
    python benchmarks/accuracy.py --write-track-record   # gpuperf/step/track_record.json

Per GPU and accuracy class: count, median and 90th percentile of |predicted/measured - 1| on the
shapes used for calibration and on held-out ones, with the target; whole-model runs (HF transformers
prefill, decode and training) one by one; and a cross-GPU check: the H100's calibrated parameters on
the H200's datasheet numbers, predicting every H200 measurement. --write-track-record writes
what every prediction reports as its track record (gpuperf.step.track_record): the held-out
errors per GPU and class, the H200-on-H100-parameters ones, and the published training runs'.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuperf.fileio import write_text  # noqa: E402
from gpuperf.hardware.loader import load_gpu  # noqa: E402
from gpuperf.perfmodel import host_pool  # noqa: E402
from gpuperf.perfmodel.accuracy import (  # noqa: E402
    TARGETS,
    calibration_host,
    e2e_table,
    load_e2e,
    load_multigpu,
    load_samples,
    memory_rows,
    multigpu_table,
    op_table,
    summarize,
)
from gpuperf.step import track_record  # noqa: E402


def result_files(d: Path) -> tuple[list[Path], list[Path]]:
    """(op and collective files, whole-model files: e2e_* on one GPU, validate_multigpu_*)."""
    files = sorted(d.glob("*.json"))
    e2e = [f for f in files if f.name.startswith(("e2e", "validate_multigpu"))]
    return [f for f in files if f not in e2e], e2e


def whole_model_table(files: list[Path], gpu) -> pd.DataFrame:  # noqa: ANN001
    """One-GPU runs (e2e_*) and runs of parallel plans (validate_multigpu_*), predicted now."""
    single = [f for f in files if f.name.startswith("e2e")]
    multi = [f for f in files if f.name.startswith("validate_multigpu")]
    parts = [e2e_table(load_e2e(single), gpu)] if single else []
    if multi:
        parts.append(multigpu_table(load_multigpu(multi), gpu))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def fmt_summary(s: pd.DataFrame, markdown: bool) -> str:
    lines = []
    head = ["class", "split", "n", "median err", "p90 err", "bias", "target", "ok"]
    rows = []
    for r in s.itertuples():
        target = r.target if pd.notna(r.target) else None
        ok = (
            ""
            if target is None or r.split != "held-out"
            else ("yes" if r.median_err <= target else "NO")
        )
        rows.append(
            [
                r._1,
                r.split,
                str(r.n),
                f"{100 * r.median_err:.1f}%",
                f"{100 * r.p90_err:.1f}%",
                f"{100 * r.bias:+.1f}%",
                f"{100 * target:.0f}%" if target else "-",
                ok,
            ]
        )
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = (
            [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)] if rows else []
        )
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def fmt_runs(t: pd.DataFrame, markdown: bool) -> str:
    head = ["model", "run", "predicted (ms)", "measured (ms)", "error"]
    rows = [
        [
            r.name,
            r.shape,
            f"{r.predicted_ms:.2f}",
            f"{r.measured_ms:.2f}",
            f"{100 * (r.ratio - 1):+.1f}%",
        ]
        for r in t.itertuples()
    ]
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    return "\n".join(
        out + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    )


def multigpu_runs_table(d: Path) -> str:
    """Every multi-GPU run (and its one-GPU baseline on the same host), Markdown; where the file
    measured its machine's host first, the prediction with that host too; then per class the
    median error of those runs both ways."""
    from gpuperf.perfmodel.accuracy import (
        multigpu_class,
        multigpu_split,
        on_host,
        predict_multigpu,
    )

    gpu = load_gpu(d.name)
    head = ["run", "GPUs", "measured (ms)", "predicted (ms)", "error", "with its host", "split",
            "file"]  # fmt: skip
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_class: dict[str, list[tuple[float, float]]] = {}
    for r in load_multigpu(sorted(d.glob("validate_multigpu_*.json"))):
        p = predict_multigpu(r, gpu).total_ms
        here = on_host(gpu, r.host)
        err = p / r.measured_ms - 1
        hosted = "–"
        split = multigpu_split(r).replace("-", " ")
        if here is not None:
            err_here = predict_multigpu(r, here).total_ms / r.measured_ms - 1
            hosted = f"{100 * err_here:+.1f}%"
            if split != "development":
                by_class.setdefault(multigpu_class(r), []).append((err, err_here))
        sc = r.scenario
        what = r.label.rsplit(" x", 1)[0] + " " + r.label.rsplit(" ", 1)[-1]
        if sc.get("pp", 1) > 1:
            what = what.replace("pipeline", f"pipeline pp{sc['pp']}×tp{sc['tp']} 1F1B "
                                f"{sc['batch'] // sc['micro_batch']} micro-batches")  # fmt: skip
        else:  # Megatron-style TP training runs as a one-stage pipeline
            what = what.replace("pipeline", "megatron").replace(" cp ", " context-parallel ")
        if sc.get("cuda_graphs"):
            what = what.replace(" graphs", "") + " (CUDA graph)"
        shape = f"b{sc['batch']} " + (f"ctx{sc['ctx']}" if sc["mode"] == "decode" else
                                      f"s{sc['seq']}")  # fmt: skip
        src = r.source.removeprefix("validate_multigpu_").removesuffix(".json")
        out.append(f"| {what} {shape} | {r.gpus} | {r.measured_ms:.1f} | {p:.1f} | "
                   f"{100 * err:+.1f}% | {hosted} | {split} | {src} |")  # fmt: skip
    out += ["", "| class (runs whose machine's host was measured) | n | median error, "
            "profile's host | median error, its host |", "|---|---|---|---|"]  # fmt: skip
    for cls, errs in sorted(by_class.items()):
        a = float(np.median([abs(e) for e, _ in errs]))
        b = float(np.median([abs(e) for _, e in errs]))
        out.append(f"| {cls} | {len(errs)} | {100 * a:.1f}% | {100 * b:.1f}% |")
    return "\n".join(out)


def readme_table(summaries: dict[str, pd.DataFrame]) -> str:
    """One Markdown table: per class, held-out median (p90) error per GPU column, and the target."""
    classes = [c for c in TARGETS if any((s["class"] == c).any() for s in summaries.values())]
    head = ["class", "target", *summaries]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cls in classes:
        cells = [cls, f"≤ {100 * TARGETS[cls]:.0f}%"]
        for s in summaries.values():
            r = s[(s["class"] == cls) & (s["split"] == "held-out")]
            if r.empty:
                cells.append("–")
                continue
            r = r.iloc[0]
            mark = "" if r.median_err <= TARGETS[cls] else " ✗"
            cells.append(f"{100 * r.median_err:.1f}% ({100 * r.p90_err:.0f}%), n={r.n}{mark}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _pct(x: float) -> float:
    return round(100 * float(x), 1)


def record_of(rows: pd.DataFrame) -> dict[str, dict]:
    """Held-out errors per class, whole-model decode split by launch (track_record.decode_variant:
    an eager step waits on its host, a CUDA graph's does not)."""
    held = rows[rows["split"] == "held-out"]
    if held.empty:
        return {}
    graph = [isinstance(x, str) and x.endswith(" graph") for x in held["shape"]]
    cls = [track_record.decode_variant(c, g) for c, g in zip(held["class"], graph, strict=True)]
    s = summarize(held.assign(**{"class": cls}))
    return {r._1: {"n": int(r.n), "median_pct": _pct(r.median_err), "p90_pct": _pct(r.p90_err),
                   "bias_pct": _pct(r.bias)} for r in s.itertuples()}  # fmt: skip


def multigpu_record(root: Path) -> dict:
    """Where the parallel plans ran: the GPU whose results hold them and the GPU counts."""
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = load_multigpu(sorted(d.glob("validate_multigpu_*.json")))
        if runs:
            return {"gpu": d.name, "gpus": sorted({r.gpus for r in runs if r.gpus > 1})}
    return {}


def published_record() -> dict[str, dict]:
    """The published training runs' errors, dense and MoE (benchmarks/published_training.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import published_training as pt

    results = [r for r in map(pt.evaluate, pt.rows()) if r.measured_s and not r.why_not]
    return {arch: _entry([r.error for r in results if keep(r)]) for arch, keep in pt.ARCHS}


def _entry(errs: list[float]) -> dict:
    a = np.array(errs)
    spread = np.abs(a)
    return {"n": len(a), "median_pct": _pct(np.median(spread)),
            "p90_pct": _pct(np.quantile(spread, 0.9)), "bias_pct": _pct(np.median(a))}  # fmt: skip


def serve_record(root: Path) -> dict[str, dict]:
    """`gpuperf serve`'s held-out errors by engine and GPU (gpuperf.step.track_record.SERVE):
    Hugging Face continuous batching measured here (benchmarks/fit_serve.py: wall time, TTFT
    p50, TPOT p50 of each run), and the held-out half of the public sample of vLLM, SGLang and
    TensorRT-LLM runs (benchmarks/serve_public.py: each row's mean TTFT and TPOT)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fit_serve
    import serve_public as sp

    out: dict[str, dict] = {"hf": {}}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        errs = fit_serve.held_out(d)
        if any(errs.values()):
            out["hf"][d.name] = {track_record.SERVE_HF[k]: _entry(v) for k, v in errs.items()}
    public: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for row in sp.rows():
        if sp.half(row) != "held":
            continue
        try:
            got = sp.row_errors(row)
        except Exception:  # noqa: BLE001 (a row gpuperf refuses: serve_public.py names it)
            continue
        gpu = load_gpu(sp.GPUS[row["system"]]).name
        public.setdefault((sp.ENGINES[row["backend"]], gpu), []).append(got)
    ttft, tpot = track_record.SERVE_PUBLIC
    for (engine, gpu), rows in sorted(public.items()):
        out.setdefault(engine, {})[gpu] = {ttft: _entry([e[0] / 100 for e in rows]),
                                           tpot: _entry([e[1] / 100 for e in rows])}  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument(
        "--markdown", action="store_true", help="print Markdown tables (for the README)"
    )
    ap.add_argument("--detail", default="", help="also list every row of this class")
    ap.add_argument(
        "--readme", action="store_true", help="print only the README's summary table (Markdown)"
    )
    ap.add_argument(
        "--write-track-record",
        nargs="?",
        const=str(track_record.RECORD),
        default=None,
        metavar="PATH",
        help=f"write the track record predictions report [{track_record.RECORD.relative_to(ROOT)}]",
    )
    ap.add_argument(
        "--multigpu",
        action="store_true",
        help="print only the README's table of multi-GPU runs (Markdown)",
    )
    args = ap.parse_args()
    root = Path(args.results)
    if args.multigpu:
        print(multigpu_runs_table(root / "h200-sxm-141gb"))
        return 0
    gpu_dirs = sorted(p for p in root.iterdir() if p.is_dir())
    if not gpu_dirs:
        print(f"no result folders under {root}")
        return 1
    write = args.write_track_record
    say = (lambda *a: None) if args.readme or write else print
    tables, summaries, records = {}, {}, {"gpus": {}}
    for d in gpu_dirs:
        gpu = load_gpu(d.name)
        ops_files, e2e_files = result_files(d)
        t = op_table(load_samples(ops_files), gpu)
        e = whole_model_table(e2e_files, gpu)
        tables[d.name] = (gpu, t, e)
        say(f"\n## {gpu.display_name} ({d.name}): {len(t)} op rows, {len(e)} whole-model runs\n")
        both = pd.concat([t, e, memory_rows(e)], ignore_index=True)
        summaries[gpu.display_name.replace("NVIDIA ", "")] = summary = summarize(both)
        records["gpus"][d.name] = record_of(both)
        say(fmt_summary(summary, args.markdown))
        if not e.empty:
            say()
            say(fmt_runs(e, args.markdown))
        if args.detail and not t.empty:
            sel = both[both["class"] == args.detail].sort_values("ratio")
            say(sel[["name", "shape", "split", "predicted_ms", "measured_ms", "ratio"]].to_string())
    # Cross-GPU: the H100's fitted parameters on the H200's datasheet numbers. The host belongs
    # to the CPU, not to the GPU, so it is the H200 machines' own, from their probes and not
    # from any whole-model run: the median SDPA plan time, and the per-kernel costs of the H100's
    # calibration host times the factor under which they predict the H200 pool's median
    # Hugging Face probe step (gpuperf.perfmodel.host_pool).
    if "h100-sxm5-80gb" in tables and "h200-sxm-141gb" in tables:
        h100 = tables["h100-sxm5-80gb"][0]
        h200, _, _ = tables["h200-sxm-141gb"]
        lent = dataclasses.replace(h100.params, host_attn_plan_s=h200.params.host_attn_plan_s)
        cross = dataclasses.replace(h200, params=lent)
        d = root / "h200-sxm-141gb"
        cal = calibration_host(cross)
        typical = host_pool.typical(host_pool.probes(sorted(d.glob("*.json"))), None, cal)
        if typical.basis == "hf step":
            cross = host_pool.scaled(cal, typical.factor, h200.params.host_attn_plan_s)
        ops_files, e2e_files = result_files(d)
        t = op_table(load_samples(ops_files), cross)
        e = whole_model_table([f for f in e2e_files if f.name.startswith("e2e")], cross)
        both = pd.concat([t, e, memory_rows(e)], ignore_index=True).assign(split="held-out")
        # The H100 results hold no NCCL runs, so its profile has no collective parameters to lend.
        both = both[~both["class"].str.startswith(("collective", "p2p"))]
        say(
            "\n## Cross-GPU: H100-calibrated parameters predicting the H200 (every row held out;"
            " collectives left out: no H100 NCCL runs; the host the H200 machines' probes"
            " measured)\n"
        )
        summaries["H200 with H100 parameters"] = summary = summarize(both)
        records["transfer"] = record_of(both)
        say(fmt_summary(summary, args.markdown))
    if write:
        records["published"] = published_record()
        records["multigpu"] = multigpu_record(root)
        records["serve"] = serve_record(root)
        out = write_text(write, json.dumps(records, indent=1, sort_keys=True) + "\n")
        print(f"wrote {out}")
    if args.readme:
        print(readme_table(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
