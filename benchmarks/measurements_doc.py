"""The tables of docs/measurements.md, and docs/collectives-accuracy.md, from the committed runs.

docs/measurements.md is written by hand; each table in it sits between
`<!-- gpuperf:table <gpu profile>/<name> -->` and `<!-- /gpuperf:table -->`, and only what lies
between the markers is regenerated: the source files, the numbers derived from them (median
errors...) and the table. docs/collectives-accuracy.md is generated whole.

    python benchmarks/measurements_doc.py --write    # regenerate both files under docs/
    python benchmarks/measurements_doc.py --check    # exit 1 if either is stale
    python benchmarks/measurements_doc.py            # print both
    python benchmarks/measurements_doc.py --results DIR

Measured numbers come only from benchmarks/results/<gpu profile>/*.json; every op row is
re-predicted with the current model, op_time(op, load_gpu(<folder name>)) (collectives go through
the same op_time into gpuperf.perfmodel.comm), and whole-model runs with gpuperf.api.predict
(gpuperf.perfmodel.accuracy.e2e_table). Nothing is typed by hand.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuperf.dtypes import BYTES  # noqa: E402
from gpuperf.fileio import write_text  # noqa: E402
from gpuperf.hardware.loader import load_gpu  # noqa: E402
from gpuperf.hardware.spec import GpuSpec  # noqa: E402
from gpuperf.measure.timing import GRAPH_THRESHOLD_S  # noqa: E402 (no torch at import)
from gpuperf.perfmodel.accuracy import e2e_table, load_e2e, read_json  # noqa: E402
from gpuperf.perfmodel.calibrate import is_calibration  # noqa: E402
from gpuperf.perfmodel.comm import busbw_factor  # noqa: E402
from gpuperf.perfmodel.ops import Attention, Copy, Elementwise, Gemm, Norm, Op  # noqa: E402
from gpuperf.perfmodel.ops_io import op_from_dict  # noqa: E402
from gpuperf.perfmodel.optime import OpTime  # noqa: E402
from gpuperf.perfmodel.roofline import matmul_peak, op_time  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DOCS = {"measurements": ROOT / "docs" / "measurements.md",
        "collectives": ROOT / "docs" / "collectives-accuracy.md"}  # fmt: skip
CMD = "python benchmarks/measurements_doc.py --write"
# A generated table: "<!-- gpuperf:table h100-sxm5-80gb/gemm-square -->", its content, the end.
MARKER = re.compile(r"(<!-- gpuperf:table (\S+) -->\n)(.*?)(<!-- /gpuperf:table -->)", re.S)
DTYPE_ORDER = ("bf16", "fp16", "fp8", "tf32", "fp32")
MIB = 2**20
COLL_HEAD = ["size", "measured (µs)", "algbw (GB/s)", "busbw (GB/s)", "predicted (µs)",
             "busbw predicted (GB/s)", "error", "NCCL algo/proto (predicted)"]  # fmt: skip
LAUNCH_LABELS = {
    "host_dispatch_us": "host dispatch, no sync (µs/call)",
    "eager_per_kernel_us": "eager call incl. sync (µs/kernel)",
    "graph_per_kernel_us": "inside a CUDA graph (µs/kernel)",
    "event_single_kernel_us": "one kernel between events (µs)",
}


@dataclass(frozen=True)
class Row:
    """One measured op row beside the current model's prediction (times in seconds)."""

    op: Op
    measured_s: float
    pred: OpTime
    raw: dict[str, Any]
    held_out: bool = False  # its file was measured to check the model, never fitted

    @property
    def err(self) -> float:
        """predicted / measured - 1: positive when the model predicts slower than measured."""
        return self.pred.time / self.measured_s - 1

    def rate(self, predicted: bool = False, what: str = "flops") -> float:
        """FLOP/s (what="flops") or bytes/s (what="bytes") at the measured or predicted time."""
        t = self.pred.time if predicted else self.measured_s
        return getattr(self.op.cost(), what) / t

    @property
    def fit(self) -> str:
        """'*' on shapes in the calibration split (the profile's parameters were fitted on them)."""
        return "*" if not self.held_out and is_calibration(self.op) else ""


def load_rows(path: Path, gpu: GpuSpec) -> list[Row]:
    """Every row of a results file that has an op and a positive measured time."""
    if not path.exists():
        return []
    out = []
    data = read_json(path)
    held_out = data.get("split") == "held-out"
    for r in data.get("rows", []):
        if r.get("op") and (r.get("measured_ms") or 0) > 0:
            op = op_from_dict(r["op"])
            out.append(Row(op, r["measured_ms"] / 1e3, op_time(op, gpu), r, held_out))
    return out


# --- formatting ---------------------------------------------------------------------------------


def num(x: float | None) -> str:
    """Three significant digits, thousands separated; '–' for a missing number."""
    if x is None:
        return "–"
    a = abs(x)
    if a >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if a >= 10 else f"{x:.2f}" if a >= 1 else f"{x:.3g}"


def pct(e: float) -> str:
    if abs(e) < 0.0005:
        return "0.0%"
    return f"{100 * e:+.1f}%" if abs(e) < 0.1 else f"{100 * e:+.0f}%"


def size(b: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", MIB), ("KiB", 2**10)):
        if b >= f:
            return f"{b / f:.4g} {unit}"
    return f"{b:g} B"


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def med_abs(errs: Iterable[float]) -> float | None:
    e = [abs(x) for x in errs]
    return statistics.median(e) if e else None


def summary(rows: Sequence[Row], what: str) -> str:
    m = med_abs(r.err for r in rows)
    held = med_abs(r.err for r in rows if not r.fit)
    return (f"Median |error| of {what}: {pct(m)[1:]} over {len(rows)} rows"
            + (f" ({pct(held)[1:]} on held-out shapes)." if held is not None else ".")
            if m is not None else "")  # fmt: skip


def source(paths: Path | Sequence[Path]) -> str:
    shown = []
    for path in [paths] if isinstance(paths, Path) else paths:
        try:
            shown.append(path.resolve().relative_to(ROOT).as_posix())
        except ValueError:
            shown.append(f"{path.parent.name}/{path.name}")
    return "Source: " + ", ".join(f"`{s}`" for s in shown) + "."


def block(path: Path | Sequence[Path], body: str, *facts: str) -> str:
    """What goes between a table's markers: its source, the facts derived from it, the table."""
    return "\n\n".join([" ".join([source(path), *(f for f in facts if f)]), body])


# --- environment --------------------------------------------------------------------------------


def environment(d: Path, gpu: GpuSpec) -> dict[str, str]:
    env = read_json(d / "env.json") if (d / "env.json").exists() else {}
    e2e = sorted(d.glob("e2e*.json"))
    extra = read_json(e2e[-1]).get("env", {}) if e2e else {}
    clocks = ("SM {clock_sm_mhz} MHz when stamped (max {clock_sm_max_mhz}), "
              "memory {clock_mem_mhz} MHz (max {clock_mem_max_mhz})")  # fmt: skip
    items = [
        ("GPU", env.get("gpu")),
        ("SMs, L2", env.get("sms") and f"{env['sms']}, {size(env.get('l2_bytes', 0))}"),
        ("memory", env.get("memory_total_bytes") and size(env["memory_total_bytes"])),
        ("compute capability", env.get("compute_capability")),
        ("driver", env.get("driver_version")),
        ("CUDA (torch build)", env.get("cuda")),
        ("torch", env.get("torch")),
        ("NCCL", env.get("nccl")),
        ("cuDNN", env.get("cudnn")),
        ("clocks", "clock_sm_max_mhz" in env and clocks.format(**env)),
        ("power limit (W)", extra.get("power_limit_w")),
        ("transformers (whole-model runs)", extra.get("transformers")),
        ("timer", env.get("timing_method")),
        ("stamped (UTC)", env.get("utc")),
        ("model profile", f"`{d.name}` ({gpu.display_name}): HBM {num(gpu.hbm_bw / 1e9)} GB/s, "
                          f"bf16 dense {num(gpu.peak('bf16') / 1e12)} TFLOP/s"),
    ]  # fmt: skip
    body = table(["", "value"], [[k, str(v)] for k, v in items if v])
    return {"environment": block(d / "env.json", body)}


# --- GEMM ---------------------------------------------------------------------------------------


def gemm_square(rows: Sequence[Row], gpu: GpuSpec) -> tuple[list[list[str]], list[Row]]:
    sel = [r for r in rows if r.op.m == r.op.n == r.op.k and r.op.m % 128 == 0]
    sel.sort(key=lambda r: (DTYPE_ORDER.index(r.op.dtype), r.op.m))
    out = [[r.op.dtype, str(r.op.m), num(r.measured_s * 1e6), num(r.rate() / 1e12),
            num(r.rate(True) / 1e12), f"{100 * r.rate() / matmul_peak(gpu, r.op.dtype):.0f}%",
            pct(r.err) + r.fit, "graph" if "cuda-graph" in r.raw.get("method", "") else "events"]
           for r in sel]  # fmt: skip
    return out, sel


def gemm_sweep(rows: Sequence[Row]) -> tuple[list[str], list[list[str]], list[Row]]:
    """The N sweeps (M, K fixed, N in steps of 128), one line per N and four columns per sweep
    (measured, predicted, predicted waves, error), so the staircase reads down the table."""
    sweeps: dict[tuple, dict[int, Row]] = defaultdict(dict)
    for r in rows:
        o = r.op
        if len({o.m, o.n, o.k}) > 1 and not (o.m % 128 or o.n % 128 or o.k % 128):
            sweeps[(o.dtype, o.m, o.k)][o.n] = r
    sweeps = {key: by_n for key, by_n in sorted(sweeps.items()) if len(by_n) >= 4}
    head = ["N"]
    for dtype, m, k in sweeps:
        tag = f"{m}×N×{k}" + ("" if dtype == "bf16" else f" {dtype}")
        head += [f"{tag} measured (µs)", "predicted (µs)", "waves", "error"]
    body = []
    for n in sorted({n for by_n in sweeps.values() for n in by_n}):
        line = [str(n)]
        for by_n in sweeps.values():
            r = by_n.get(n)
            line += (["–"] * 4 if r is None else
                     [num(r.measured_s * 1e6), num(r.pred.time * 1e6),
                      str(r.pred.detail.get("waves", "–")), pct(r.err) + r.fit])  # fmt: skip
        body.append(line)
    return head, body, [r for by_n in sweeps.values() for r in by_n.values()]


def _span(a: Any, b: Any, sep: str = "–") -> str:
    return str(a) if a == b else f"{a}{sep}{b}"


def gemm_misaligned(rows: Sequence[Row]) -> tuple[list[list[str]], list[Row]]:
    """Shapes off a multiple of 128 next to the aligned shape they round to (same file, dtype)."""
    by_shape = {(r.op.dtype, r.op.m, r.op.n, r.op.k): r for r in rows}
    out, used = [], []
    for r in rows:
        o = r.op
        dims = (o.m, o.n, o.k)
        if not any(d % 128 for d in dims):
            continue
        ref = by_shape.get((o.dtype, *(round(d / 128) * 128 for d in dims)))
        if ref is None:
            continue
        used.append(r)
        out.append([f"{o.m}×{o.n}×{o.k}", f"{ref.op.m}×{ref.op.n}×{ref.op.k}", o.dtype,
                    num(r.measured_s * 1e6), f"×{r.measured_s / ref.measured_s:.2f}",
                    num(r.pred.time * 1e6), f"×{r.pred.time / ref.pred.time:.2f}",
                    pct(r.err) + r.fit])  # fmt: skip
    return out, used


def gemm_models(rows: Sequence[Row]) -> list[list[str]]:
    """LLM-layer GEMMs ("<model>/t<tokens>/<op>") summed per model and token count."""
    groups: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for r in rows:
        parts = r.op.name.split("/")
        if len(parts) >= 3 and parts[1][1:].isdigit():
            groups[(parts[0], int(parts[1][1:]))].append(r)
    out = []
    for (model, tokens), rs in sorted(groups.items()):
        meas, pred = sum(r.measured_s for r in rs), sum(r.pred.time for r in rs)
        worst = max(rs, key=lambda r: abs(r.err))
        flops = sum(r.op.cost().flops for r in rs)
        worst_name = "/".join(worst.op.name.split("/")[2:])
        out.append([model, str(tokens), str(len(rs)), num(meas * 1e6), num(pred * 1e6),
                    pct(pred / meas - 1), num(flops / meas / 1e12),
                    f"{worst_name} {pct(worst.err)}{worst.fit}"])  # fmt: skip
    return out


def gemm_tables(d: Path, gpu: GpuSpec) -> dict[str, str]:
    out = {}
    path = d / "gemm.json"
    rows = [r for r in load_rows(path, gpu) if isinstance(r.op, Gemm)]
    if rows:
        sq, sq_rows = gemm_square(rows, gpu)
        head = ["dtype", "M=N=K", "measured (µs)", "measured TFLOP/s", "predicted TFLOP/s",
                "measured % of peak", "error", "timer"]  # fmt: skip
        out["gemm-square"] = block(path, table(head, sq), summary(sq_rows, "these"))
        st_head, st, st_rows = gemm_sweep(rows)
        out["gemm-sweep"] = block(path, table(st_head, st), summary(st_rows, "the sweep"))
        mis, mis_rows = gemm_misaligned(rows)
        head = ["shape M×N×K", "aligned", "dtype", "measured (µs)", "× aligned (measured)",
                "predicted (µs)", "× aligned (predicted)", "error"]  # fmt: skip
        left = len(rows) - len({id(r) for r in sq_rows + st_rows + mis_rows})
        more = f"({left} more rows of {path.name} are not shown in these tables.)" if left else ""
        out["gemm-misaligned"] = block(path, table(head, mis), summary(mis_rows, "these"), more)
    path = d / "gemm_models.json"
    rows = load_rows(path, gpu)
    if rows:
        head = ["model", "tokens (M)", "GEMMs", "Σ measured (µs)", "Σ predicted (µs)", "error",
                "measured TFLOP/s", "worst op (error)"]  # fmt: skip
        body = table(head, gemm_models(rows))
        out["gemm-models"] = block(path, body, summary(rows, "single GEMMs"))
    return out


# --- attention and memory-bound ops: pivots -----------------------------------------------------


def pivot(
    rows: Sequence[Row], row_key: Callable[[Row], Any], col_key: Callable[[Row], str],
    cell: Callable[[Row], str], label: Callable[[Any], str],
) -> tuple[list[str], list[list[str]]]:  # fmt: skip
    """One line per row_key, one column per col_key (in order of first appearance)."""
    cols = list(dict.fromkeys(col_key(r) for r in rows))
    grid: dict[Any, dict[str, str]] = defaultdict(dict)
    for r in rows:
        grid[row_key(r)][col_key(r)] = cell(r)
    body = [[label(k)] + [grid[k].get(c, "–") for c in cols] for k in sorted(grid)]
    return cols, body


def _heads(o: Attention) -> str:
    return "MHA" if o.kv_heads == o.heads else f"GQA kv={o.kv_heads}"


def attention_tables(d: Path, gpu: GpuSpec) -> dict[str, str]:
    out = {}
    path = d / "attention.json"
    rows = [r for r in load_rows(path, gpu) if isinstance(r.op, Attention)]
    pre = [r for r in rows if r.op.q_len > 16]
    dec = [r for r in rows if r.op.q_len <= 16]
    if pre:
        cols, body = pivot(
            pre, lambda r: (r.op.q_len, r.op.batch, r.op.heads),
            lambda r: f"{_heads(r.op)} {'causal' if r.op.causal else 'full'}",
            lambda r: f"{num(r.rate() / 1e12)} / {num(r.rate(True) / 1e12)} ({pct(r.err)}{r.fit})",
            lambda k: f"b{k[1]} h{k[2]} s{k[0]}",
        )  # fmt: skip
        what = f"Head dim {pre[0].op.head_dim}, {pre[0].op.dtype}, SDPA."
        out["attention-prefill"] = block(path, table(["shape", *cols], body), what,
                                         summary(pre, "prefill"))  # fmt: skip
    if dec:
        cols, body = pivot(
            dec, lambda r: (r.op.kv_len, r.op.batch, r.op.heads), lambda r: _heads(r.op),
            lambda r: f"{num(r.rate(what='bytes') / 1e9)} / {num(r.rate(True, 'bytes') / 1e9)}"
                      f" ({pct(r.err)}{r.fit})",
            lambda k: f"b{k[1]} h{k[2]} ctx{k[0]}",
        )  # fmt: skip
        out["attention-decode"] = block(path, table(["shape", *cols], body),
                                        summary(dec, "decode"))  # fmt: skip
    path = d / "attention_backends.json"
    rows = load_rows(path, gpu)
    if rows:
        body = [[r.raw.get("shape", r.op.name), str(r.raw.get("detail", {}).get("backend", "")),
                 num(r.measured_s * 1e6), num(r.pred.time * 1e6), pct(r.err) + r.fit]
                for r in rows]  # fmt: skip
        head = ["shape", "SDPA backend", "measured (µs)", "predicted (µs)", "error"]
        out["attention-backends"] = block(path, table(head, body))
    return out


def _mem_col(o: Op) -> str:
    if isinstance(o, Norm):
        return f"add+{o.fn}" if o.residual else o.fn
    return o.fn if isinstance(o, Elementwise) else o.kind


def _elements(o: Op) -> int:
    if isinstance(o, Copy):
        return o.nbytes // BYTES[o.dtype]
    return o.rows * o.cols if isinstance(o, Norm) else getattr(o, "numel", 0)


def memory_tables(d: Path, gpu: GpuSpec) -> dict[str, str]:
    path = d / "memory.json"
    rows = load_rows(path, gpu)
    if not rows:
        return {}
    levels = {_elements(r.op) for r in rows if isinstance(r.op, Elementwise | Copy)}
    main = [r for r in rows if _elements(r.op) in levels]
    cols, body = pivot(
        main, lambda r: _elements(r.op), lambda r: _mem_col(r.op),
        lambda r: f"{num(r.rate(what='bytes') / 1e9)} / {num(r.rate(True, 'bytes') / 1e9)}",
        lambda n: f"{n:,}",
    )  # fmt: skip
    by_col = defaultdict(list)
    for r in main:
        by_col[_mem_col(r.op)].append(r.err)
    body.append(["median \\|error\\|"] + [pct(med_abs(by_col[c]))[1:] for c in cols])
    what = (f"Tensors are {rows[0].op.dtype} unless the op casts; datasheet HBM "
            f"{num(gpu.hbm_bw / 1e9)} GB/s.")  # fmt: skip
    out = {"memory": block(path, table(["elements", *cols], body), what, summary(main, "these"))}
    shown = {id(r) for r in main}
    rest = [r for r in rows if id(r) not in shown]
    if rest:
        body = [[r.raw.get("shape", r.op.name), num(r.measured_s * 1e6),
                 num(r.rate(what="bytes") / 1e9), num(r.pred.time * 1e6), pct(r.err) + r.fit]
                for r in rest]  # fmt: skip
        head = ["op", "measured (µs)", "measured GB/s", "predicted (µs)", "error"]
        out["memory-other"] = block(path, table(head, body))
    return out


# --- timer cross-check, copy bandwidth, whole-model runs ----------------------------------------


def crosscheck_tables(d: Path, gpu: GpuSpec) -> dict[str, str]:
    path = d / "crosscheck.json"
    if not path.exists():
        return {}
    data = read_json(path)
    runs = [g for g in data.get("gemm", []) if g.get("do_bench_ms")]
    out = {}
    if runs:
        body = [["×".join(map(str, g["mnk"])), num(g["ours_ms"] * 1e3),
                 num(g["do_bench_ms"] * 1e3), pct(g["ours_ms"] / g["do_bench_ms"] - 1)]
                for g in runs]  # fmt: skip
        thr = GRAPH_THRESHOLD_S * 1e3
        big = [g["ours_ms"] / g["do_bench_ms"] - 1 for g in runs if g["ours_ms"] >= thr]
        small = [g["ours_ms"] / g["do_bench_ms"] - 1 for g in runs if g["ours_ms"] < thr]
        facts = []
        if big:
            side = " (ours lower)" if max(big) < 0 else " (ours higher)" if min(big) > 0 else ""
            worst = pct(max(abs(x) for x in big))[1:]
            facts.append(f"Kernels of {thr * 1e3:.0f} µs or more agree within {worst}{side}.")
        if small:
            span = _span(pct(min(small)), pct(max(small)), " to ")
            facts.append(f"Kernels under {thr * 1e3:.0f} µs differ more: ours vs do_bench {span}.")
        head = ["M×N×K", "our timer (µs)", "do_bench (µs)", "ours vs do_bench"]
        out["timer-crosscheck"] = block(path, table(head, body), *facts)
    if data.get("copy_1GiB_gbps"):
        gbps = data["copy_1GiB_gbps"]
        body = [["copy 1 GiB (read + write)", num(gbps), num(gpu.hbm_bw / 1e9),
                 f"{100 * gbps * 1e9 / gpu.hbm_bw:.1f}%"]]  # fmt: skip
        head = ["op", "measured GB/s", "datasheet HBM GB/s", "% of datasheet"]
        out["copy-bandwidth"] = block(path, table(head, body))
    return out


def e2e_tables(d: Path, gpu: GpuSpec) -> dict[str, str]:
    files = sorted(d.glob("e2e*.json"))
    if not files:
        return {}
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for f in files:
        loaded = load_e2e([f])  # the runs gpuperf models (it leaves some out, e.g. fused AdamW)
        preds = e2e_table(loaded, gpu).to_dict("records") if loaded else []
        modeled = {_run_key(r.model, r.scenario): p for r, p in zip(loaded, preds, strict=True)}
        for r in read_json(f).get("runs", []):
            if not r.get("measured_ms"):
                continue
            key = _run_key(r["model"], r["scenario"])
            e = runs.setdefault(key, {"note": r.get("note", "")})
            e[f.stem] = r["measured_ms"]
            if key in modeled:
                e["pred"] = modeled[key]["predicted_ms"]
                e["fit"] = "*" if modeled[key]["split"] == "calibration" else ""
    head = ["model", "scenario", *(f"measured {f.stem} (ms)" for f in files), "predicted (ms)",
            "error vs median", "how it ran"]  # fmt: skip
    body = []
    for (model, label), e in runs.items():
        meas = statistics.median(e[f.stem] for f in files if f.stem in e)
        err = pct(e["pred"] / meas - 1) + e["fit"] if "pred" in e else "not modeled"
        body.append([model, label, *(num(e.get(f.stem)) for f in files),
                     num(e.get("pred")), err, e["note"]])  # fmt: skip
    out = {"e2e": block(files, table(head, body))}
    probe = [(f, p) for f in files for p in [read_json(f).get("host_probe")] if p]
    if probe:
        body = [[f.stem, k, str(v.get("batch")), str(v.get("seq")), str(v.get("ctx")),
                 num(v["host_ms"]), str(v["cuda_kernels"]),
                 num(v["host_ms"] * 1e3 / v["cuda_kernels"])]
                for f, p in probe for k, v in p.items()]  # fmt: skip
        head = ["file", "pass", "batch", "seq", "ctx", "host time (ms)", "CUDA kernels",
                "host µs per kernel"]  # fmt: skip
        out["host-probe"] = block(probe[-1][0], table(head, body))
    launch = [(f, read_json(f).get("launch") or {}) for f in files]
    keys = list(dict.fromkeys(k for _, lc in launch for k in lc))
    if keys:
        body = [[LAUNCH_LABELS.get(k.split("/")[0], k.split("/")[0]), k.split("/")[-1],
                 *(num(lc.get(k)) for _, lc in launch)] for k in keys]  # fmt: skip
        head = ["cost", "kernel", *(f"{f.stem} (µs)" for f, _ in launch)]
        out["launch"] = block(files, table(head, body))
    return out


# --- collectives --------------------------------------------------------------------------------


def _run_key(model: str, sc: dict[str, Any]) -> tuple[str, str]:
    where = f"ctx{sc.get('ctx')}" if sc.get("mode") == "decode" else f"s{sc.get('seq')}"
    how = "graph" if sc.get("cuda_graphs") else sc.get("impl", "eager")
    ckpt = " ckpt" if sc.get("recompute") == "full" else ""
    return model, f"{sc.get('mode')} b{sc.get('batch')} {where}{ckpt} {how}"


def coll_rows(path: Path, gpu: GpuSpec) -> tuple[str, int, list[Row]]:
    """(collective, ranks, rows) of one coll_<name>_<n>gpu.json file."""
    data = read_json(path)
    rows = load_rows(path, gpu)
    ranks = int(data.get("env", {}).get("world_size") or rows[0].raw.get("ranks", 2))
    return str(data.get("kind", path.stem.split("_")[1])), ranks, rows


def coll_table(coll: str, ranks: int, rows: Sequence[Row]) -> str:
    f = busbw_factor(coll, ranks)
    body = []
    for r in sorted(rows, key=lambda r: r.op.nbytes):
        algbw = r.op.nbytes / r.measured_s / 1e9
        d = r.pred.detail
        body.append([size(r.op.nbytes), num(r.measured_s * 1e6), num(algbw), num(algbw * f),
                     num(r.pred.time * 1e6), num(d.get("busbw_gbps")), pct(r.err) + r.fit,
                     f"{d.get('algo')}/{d.get('proto')}"])  # fmt: skip
    return table(COLL_HEAD, body)


def collectives_doc(results: Path = RESULTS) -> str:
    """docs/collectives-accuracy.md: every NCCL run beside gpuperf's prediction."""
    parts = [
        "# Collectives: measured NCCL vs gpuperf",
        f"Generated by `{CMD}` from the committed real runs "
        "(`benchmarks/results/<gpu>/coll_<collective>_<n>gpu.json`); do not edit by hand.",
        "Sizes follow nccl-tests (the size column of `all_reduce_perf` etc.; "
        "see docs/collectives.md). algbw = size / time; busbw = algbw × the nccl-tests factor "
        "(allreduce 2(n−1)/n; allgather, reducescatter, alltoall (n−1)/n; broadcast, sendrecv "
        "1). Predicted: `op_time(op, load_gpu(<gpu>))`, "
        "one node of n GPUs over the profile's NVLink, NVLS not considered (the runs set "
        "NCCL_NVLS_ENABLE=0, gpuperf.measure.collectives). "
        "error = predicted / measured − 1; `*` marks sizes in the calibration split (the profile's "
        "comm_* parameters were fitted on them); the others are held out. The 3-GPU runs "
        "marked 'chunks not 16-byte aligned' split a power-of-two size three ways, so each "
        "rank's chunk misses 16-byte alignment (the harness now rounds it, as nccl-tests does); "
        "NCCL runs those slower, which the model does not predict, and the 'all' row leaves "
        "them out.",
    ]
    summ: list[list[str]] = []
    every: list[Row] = []
    for d in sorted(p for p in results.iterdir() if p.is_dir()):
        files = sorted(d.glob("coll_*.json"))
        if not files:
            continue
        gpu = load_gpu(d.name)
        loaded = sorted((coll_rows(f, gpu) + (f,) for f in files), key=lambda x: (x[0], x[1]))
        env = read_json(files[0]).get("env", {})
        extra = gpu.params.extra
        methods = "; ".join(sorted({r.raw.get("method", "?") for x in loaded for r in x[2]}))
        parts.append(f"## {gpu.display_name} (`{d.name}`)")
        parts.append(
            f"{env.get('gpu')} × {env.get('gpu_count')} in one host, driver "
            f"{env.get('driver_version')}, NCCL {env.get('nccl')}, torch {env.get('torch')}. "
            f"Timer: {methods}. Model inputs: NVLink {num(gpu.nvlink_bw / 1e9)} GB/s per GPU, "
            f"comm_bw_eff {extra.get('comm_bw_eff', 1.0)}, comm_lat_scale "
            f"{extra.get('comm_lat_scale', 1.0)}, comm_channel_copy_bw "
            f"{extra.get('comm_channel_copy_bw', 0.0):.4g} B/s (the ring copy tail, "
            "docs/collectives.md)."
        )
        for coll, ranks, rows, f in loaded:
            if not rows:
                continue
            odd = f.stem.endswith("_unaligned")  # each rank's chunk off 16 B: not modeled
            if not odd:
                every += rows
            what = f"{coll}, {ranks} GPUs" + (", chunks not 16-byte aligned" if odd else "")
            parts.append(f"### {what}\n\n" + block(f, coll_table(coll, ranks, rows)))
            big = [r.err for r in rows if r.op.nbytes >= MIB]
            small = [r.err for r in rows if r.op.nbytes < MIB]
            held = [r.err for r in rows if r.op.nbytes >= MIB and not r.fit]
            n_gpus = f"{ranks} (chunks off 16 B)" if odd else str(ranks)
            summ.append([d.name, coll, n_gpus, *(_m(x) for x in (big, held, small))])
    if not every:
        return "\n\n".join(parts + ["No collective measurements found."]) + "\n"
    big = [r.err for r in every if r.op.nbytes >= MIB]
    small = [r.err for r in every if r.op.nbytes < MIB]
    held = [r.err for r in every if r.op.nbytes >= MIB and not r.fit]
    summ.append(["all", "all", "aligned", *(_m(x) for x in (big, held, small))])
    head = ["GPU", "collective", "GPUs", "median \\|error\\| ≥ 1 MiB",
            "≥ 1 MiB, held out", "median \\|error\\| < 1 MiB"]  # fmt: skip
    parts.insert(3, "## Summary\n\n" + table(head, summ))
    return "\n\n".join(parts) + "\n"


def _m(errs: Sequence[float]) -> str:
    m = med_abs(errs)
    return "–" if m is None else f"{pct(m)[1:]} (n={len(errs)})"


# --- the documents ------------------------------------------------------------------------------


def tables(results: Path = RESULTS) -> dict[str, str]:
    """Every table the committed runs give, by marker name ("<gpu profile>/<table>")."""
    out = {}
    for d in sorted(p for p in results.iterdir() if p.is_dir()):
        if not any(f for f in d.glob("*.json") if not f.name.startswith("coll_")):
            continue
        gpu = load_gpu(d.name)
        for make in (environment, gemm_tables, attention_tables, memory_tables,
                     crosscheck_tables, e2e_tables):  # fmt: skip
            out |= {f"{d.name}/{name}": text for name, text in make(d, gpu).items()}
    return out


def render(doc: str, tabs: dict[str, str]) -> str:
    """`doc` with the content between every pair of markers regenerated from `tabs`."""

    def one(m: re.Match) -> str:
        name = m.group(2)
        if name not in tabs:
            raise SystemExit(f"{DOCS['measurements'].name}: no data for table {name!r} "
                             f"(tables with data: {', '.join(sorted(tabs))})")  # fmt: skip
        return f"{m.group(1)}\n{tabs[name]}\n\n{m.group(4)}"

    return MARKER.sub(one, doc)


def unplaced(doc: str, tabs: dict[str, str]) -> list[str]:
    """Tables with data that the document has no markers for (a new results file or GPU)."""
    return sorted(set(tabs) - {m.group(2) for m in MARKER.finditer(doc)})


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--results", default=str(RESULTS), help="folder of <gpu profile>/*.json")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite docs/measurements.md's "
                      "tables and docs/collectives-accuracy.md")  # fmt: skip
    mode.add_argument("--check", action="store_true", help="exit 1 if either file is stale")
    args = ap.parse_args(argv)
    results = Path(args.results)
    tabs = tables(results)
    old = {
        key: path.read_text(encoding="utf-8") if path.exists() else "" for key, path in DOCS.items()
    }
    new = {"measurements": render(old["measurements"], tabs),
           "collectives": collectives_doc(results)}  # fmt: skip
    for name in unplaced(old["measurements"], tabs):
        print(f"note: {DOCS['measurements'].name} has no marker for table {name}", file=sys.stderr)
    stale = [key for key in DOCS if new[key] != old[key]]
    for key in DOCS:
        if args.check:
            if key in stale:
                print(f"{DOCS[key].relative_to(ROOT)} is stale: run {CMD}")
        elif args.write:
            if key in stale:
                write_text(DOCS[key], new[key])
            print(f"{DOCS[key].relative_to(ROOT)} is current")
        else:
            print(new[key])
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
