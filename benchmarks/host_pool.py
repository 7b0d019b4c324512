"""The machines behind each GPU profile's host constants (gpuperf.perfmodel.host_pool).

Prints every result file that probed its machine (tiny eager kernels' issue time against the
calibration host, cuDNN plan time), the pool's median host, and whether the shipped profile
holds it. --write moves the profile's host constants to it (the calibration host's fitted
values are the profile's over its recorded host_pool_factor, so writing twice changes nothing);
--check exits 1 when a profile is not at its pool's median host. --held-out predicts each
probed machine's eager decode runs with the pool of the other machines, on the tiny kernels'
factor and on the Hugging Face probe step's.

    .venv/bin/python benchmarks/host_pool.py [--write | --check | --held-out]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel import host_pool
from gpuperf.perfmodel.accuracy import calibration_host, load_e2e
from gpuperf.perfmodel.calibrate import E2E_CALIBRATION_MODELS

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PROFILES = ROOT / "gpuperf" / "hardware" / "profiles"
GPUS = ("h100-sxm5-80gb", "h200-sxm-141gb")
SOURCE = (
    "# source: calibrated, then moved to the median of {n} probed machines "
    "(benchmarks/host_pool.py)"
)


def pool(gpu: str) -> tuple[host_pool.TypicalHost, list[host_pool.HostProbe], dict | None]:
    """The typical host of `gpu`'s result files, its probes, the calibration host's launches:
    the mean over the files whose calibration-model runs are fitted, as `gpuperf calibrate
    --from` takes them."""
    files = sorted((RESULTS / gpu).glob("*.json"))
    runs = load_e2e(f for f in files if f.name.startswith("e2e"))
    fitted = {r.source for r in runs if r.model in E2E_CALIBRATION_MODELS}
    probes = host_pool.probes(files)
    ref = host_pool.mean_launch(p for p in probes if p.source in fitted)
    return host_pool.typical(probes, ref, calibration_host(load_gpu(gpu))), probes, ref


def wanted(gpu: str) -> dict[str, float]:
    """The profile's host constants at its pool's median host."""
    typical, _, _ = pool(gpu)
    p = load_gpu(gpu).params
    old = float(p.extra.get("host_pool_factor", 1.0))
    k = typical.factor if typical.factor is not None else old
    plan = typical.plan_s if typical.plan_s is not None else p.host_attn_plan_s
    return {"host_dispatch_s": p.host_dispatch_s / old * k,
            "host_decode_layer_s": p.host_decode_layer_s / old * k,
            "host_attn_plan_s": plan, "host_pool_factor": k}  # fmt: skip


def mismatches(gpu: str) -> list[str]:
    p = load_gpu(gpu).params
    have = {"host_dispatch_s": p.host_dispatch_s, "host_decode_layer_s": p.host_decode_layer_s,
            "host_attn_plan_s": p.host_attn_plan_s,
            "host_pool_factor": float(p.extra.get("host_pool_factor", 1.0))}  # fmt: skip
    return [f"{gpu}: {k} is {have[k]:.6g}, its pool says {v:.6g}" for k, v in wanted(gpu).items()
            if abs(have[k] - v) > 1e-5 * max(abs(v), 1e-12)]  # fmt: skip


def write(gpu: str) -> None:
    typical, probes, _ = pool(gpu)
    path = PROFILES / f"{gpu}.toml"
    text = path.read_text()
    for name, value in wanted(gpu).items():
        n = len(typical.plans_s) if name == "host_attn_plan_s" else len(typical.factors)
        line = f"{name} = {value:.6g}  {SOURCE.format(n=n)}"
        pattern = re.compile(rf"^{name} = .*$", re.M)
        if pattern.search(text):
            text = pattern.sub(line, text, count=1)
        elif "[model.extra]\n" in text:  # host_pool_factor, first time: [model.extra]'s head
            text = text.replace("[model.extra]\n", f"[model.extra]\n{line}\n", 1)
        else:
            raise SystemExit(f"{path}: no [model.extra] table to record host_pool_factor in")
    path.write_text(text)
    print(f"updated {path.relative_to(ROOT)}")


def _cell(v: float | None, scale: float = 1.0, fmt: str = "8.2f") -> str:
    return f"{v * scale:{fmt}}" if v is not None else f"{'-':>8s}"


def show(gpu: str) -> None:
    typical, probes, ref = pool(gpu)
    cal = calibration_host(load_gpu(gpu))
    print(f"{gpu}: calibration host launches (µs) {ref}")
    print(f"  {'result file':40s} {'issue x':>8s} {'plan ms':>8s} {'hf x':>8s} {'hf plan':>8s}")
    for p in probes:
        hf_k, hf_plan = host_pool.hf_host(cal, p.hf)
        tiny = _cell(host_pool.ratio(p.launch_us, ref))
        plans = f"{_cell(p.plan_s, 1e3, '8.1f')} {_cell(hf_k)} {_cell(hf_plan, 1e3, '8.1f')}"
        print(f"  {p.source:40s} {tiny} {plans}")
    k = f"{typical.factor:.3f}" if typical.factor else "-"
    plan = f"{1e3 * typical.plan_s:.1f} ms" if typical.plan_s else "-"
    print(f"  median host ({typical.basis}): {k}x the calibration host's per-kernel costs "
          f"({len(typical.factors)} machines), plans in {plan} "
          f"({len(typical.plans_s)})")  # fmt: skip


def held_out(gpu: str) -> None:
    """Each machine whose file has eager decode runs at batch 1, predicted with the pool of the
    other machines (its own probes left out), on either basis: the median |error| of its runs."""
    import statistics

    from gpuperf.perfmodel.accuracy import e2e_table

    _, probes, ref = pool(gpu)
    cal = calibration_host(load_gpu(gpu))
    files = sorted((RESULTS / gpu).glob("e2e*.json"), key=lambda f: f.name)
    print(f"{gpu}: each machine's batch-1 eager decode runs, the pool of the others (|error|)")
    print(f"  {'result file':28s} {'runs':>4s} {'tiny kernels':>13s} {'hf step':>8s}")
    totals: dict[str, list[float]] = {"tiny": [], "hf": []}
    for f in files:
        runs = [r for r in load_e2e([f]) if r.scenario.get("mode") == "decode"
                and r.scenario.get("batch") == 1 and not r.scenario.get("cuda_graphs")]  # fmt: skip
        others = [p for p in probes if p.source != f.name]
        if not runs or len(others) == len(probes):
            continue
        cells = []
        for basis, c in (("tiny", None), ("hf", cal)):
            t = host_pool.typical(others, ref, c)
            if basis == "hf" and t.basis != "hf step" or t.factor is None:
                cells.append(f"{'-':>8s}")
                continue
            here = host_pool.scaled(cal, t.factor, t.plan_s)
            errs = list(abs(e2e_table(runs, here)["ratio"] - 1) * 100)
            totals[basis] += errs
            cells.append(f"{statistics.median(errs):7.1f}%")
        print(f"  {f.name:28s} {len(runs):4d} {cells[0]:>13s} {cells[1]:>8s}")
    for basis, errs in totals.items():
        if errs:
            print(f"  all runs, {basis}: median {statistics.median(errs):.1f}% over {len(errs)}")


def main(argv: list[str]) -> int:
    if "--held-out" in argv:
        for gpu in GPUS:
            held_out(gpu)
        return 0
    bad = []
    for gpu in GPUS:
        show(gpu)
        if "--write" in argv:
            write(gpu)
        else:
            bad += mismatches(gpu)
    for line in bad:
        print(line)
    return 1 if bad and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
