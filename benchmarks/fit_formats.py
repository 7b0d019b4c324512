"""Fit the parameters of the kernels that have their own (calibrate.LATE: fp8 and int8 GEMMs,
rowwise fp8, weight-only int4/int8, MoE grouped GEMMs; masked prefill attention; the softmax's
share of an attention pair, the attention backward, dropout in attention; torch's foreach ops;
eager dropout; Mamba-2's scan kernels) on their calibration-split rows, holding every other
parameter of the shipped profile, and print their held-out errors.

    .venv/bin/python benchmarks/fit_formats.py h100 [--write] [--only PARAM ...]

The other parameters were fitted before these kernels were measured (gpuperf calibrate); a full
`gpuperf calibrate --from` refits them too (calibrate.LATE fits these last, on their own rows).
--write puts the values in the profile's [model.extra].
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuperf.hardware.loader import PROFILES_DIR, load_gpu  # noqa: E402
from gpuperf.hardware.spec import ModelParams  # noqa: E402
from gpuperf.perfmodel import calibrate as cal  # noqa: E402
from gpuperf.perfmodel.accuracy import load_samples  # noqa: E402
from gpuperf.perfmodel.roofline import op_time  # noqa: E402

FILES = (
    "gemm.json",
    "gemm_quant.json",
    "gemm_quant_decode.json",
    "grouped_gemm.json",
    "grouped_gemm_bwd.json",
    "grouped_gemm_fp8.json",
    "grouped_gemm_decode.json",
    "attention_masked_prefill.json",
    "attention_masked_train.json",
    "train_kernels.json",
    "eager_ew.json",
    "partial_rope.json",
    "ssd_kernels.json",
    "ssd_decode.json",
)
NAMES = list(cal.LATE_PARAMS)
SOURCE = "calibrated by benchmarks/fit_formats.py (calibration split of {files})"


def write(profile: Path, values: dict[str, float], source: str) -> None:
    """Set `values` in the profile: ModelParams fields in [model], the rest in [model.extra]
    (replacing earlier lines of the same keys)."""
    fields = {f.name for f in dataclasses.fields(ModelParams)}
    text = profile.read_text()
    head, sep, extra = text.partition("\n[model.extra]\n")
    if not sep:
        head, sep, extra = text.rstrip("\n"), "\n\n[model.extra]\n", ""

    def lines(body: str, keys: dict[str, float]) -> list[str]:
        keep = [ln for ln in body.splitlines() if ln.split("=")[0].strip() not in keys]
        return keep + [f"{k} = {v:.6g}  # source: {source}" for k, v in keys.items()]

    top = {k: v for k, v in values.items() if k in fields}
    rest = {k: v for k, v in values.items() if k not in fields}
    if top:  # [model] is the table just before [model.extra]; a profile may have none yet
        before, msep, model = head.partition("\n[model]\n")
        if not msep:
            before, msep, model = head.rstrip("\n") + "\n", "\n[model]\n", ""
        head = before + msep + "\n".join(lines(model, top)) + "\n"
    profile.write_text(head + sep + "\n".join(lines(extra, rest)) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu", help="a shipped profile (h100, h200)")
    ap.add_argument("--write", action="store_true")
    ap.add_argument(
        "--only",
        nargs="+",
        choices=NAMES,
        metavar="PARAM",
        help="fit these parameters alone (the rest stay as the profile has them)",
    )
    a = ap.parse_args()
    gpu = load_gpu(a.gpu)
    folder = ROOT / "benchmarks" / "results" / gpu.name
    files = [folder / f for f in FILES if (folder / f).exists()]
    samples = [s for s in load_samples(files) if cal.is_late(s.op)]
    calib = [s for s in samples if cal.calibrates(s)]
    names = a.only or NAMES
    params = cal.fit(calib, gpu, names)
    fitted = dataclasses.replace(gpu, params=params)
    # Only the stages with enough rows of their kernel here ran (calibrate.fit: three); the
    # others' parameters stay as the profile has them, left out.
    ran = {n for stage, select in cal.LATE
           if sum(select(s.op) for s in calib) >= 3 for n in stage}  # fmt: skip
    values = {n: v for n in names
              if n in ran and not math.isnan(v := cal.param_value(params, n))}  # fmt: skip
    for n, v in values.items():
        print(f"{n:22s} {v:.4g}")
    errs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in samples:
        split = "calibration" if cal.calibrates(s) else "held-out"
        e = op_time(s.op, fitted).time / s.measured_s - 1
        errs[(cal.op_class(s.op), split)].append(e)
    print(f"\n{'class':40s} {'split':12s} {'n':>4s} {'median |err|':>13s} {'bias':>7s}")
    for (cls, split), e in sorted(errs.items()):
        med = statistics.median(abs(x) for x in e)
        bias = 100 * statistics.median(e)
        print(f"{cls:40s} {split:12s} {len(e):4d} {100 * med:12.1f}% {bias:+6.1f}%")
    if a.write:  # the files whose rows the fitted stages took
        used = {
            s.source
            for s in calib
            for stage, select in cal.LATE
            if set(stage) & set(names) and select(s.op)
        }
        names = "+".join(f.stem for f in files if f.name in used)
        write(PROFILES_DIR / f"{gpu.name}.toml", values, SOURCE.format(files=names))
        print(f"wrote [model.extra] of {gpu.name}.toml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
