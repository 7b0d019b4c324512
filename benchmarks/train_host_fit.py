"""The host costs of Hugging Face gradient checkpointing, and of torchtitan's per-op selective
checkpointing, from train_host_probe.py's files.

    python benchmarks/train_host_fit.py [--check]

For each family of benchmarks/results/<gpu>/train_host.json probed at two depths, what four
more layers cost the host in each phase (no-grad forward, forward, backward, and both under
checkpointing), per kernel gpuperf predicts for those layers, against the same machine's
no-grad forward per kernel: a recomputed kernel's factor, a checkpointed layer's extra forward
cost (in kernels), and for reference the forward's and backward's factors. Prints the table and
the medians over every family and machine; --check exits 1 unless gpuperf/step/cost.py's
HOST_RECOMPUTE_FACTOR and HOST_CKPT_LAYER_KERNELS are those medians (to 1%). The same from
train_host_sac.json (the probe's --sac): a checkpointed layer's forward under selective
checkpointing's dispatch mode over the plain forward, and a recomputed kernel's host cost
(HOST_SAC_FORWARD_FACTOR, HOST_SAC_RECOMPUTE_FACTOR).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuperf.fileio import read_json_object  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PHASES = ("inf", "fwd", "bwd", "ckpt_fwd", "ckpt_bwd")


def kernels_by_phase(config: dict, name: str, batch: int, seq: int,
                     recompute: str = "full") -> dict[str, int]:  # fmt: skip
    """The kernels gpuperf predicts for a checkpointed eager training step of `config`, by phase:
    forward, backward, recomputation, optimizer (by the ops' names; the count is the same on
    every GPU, the H100 profile only names one)."""
    from gpuperf.api import predict
    from gpuperf.workloads.config import from_hf_dict

    cfg = from_hf_dict(config, name=name)
    table = predict(cfg, gpu="h100", mode="train", impl="eager", batch=batch, seq=seq,
                    recompute=recompute).table  # fmt: skip
    n = {"fwd": 0, "bwd": 0, "rec": 0, "opt": 0}
    for op in table["name"]:
        last = op.rsplit("/", 1)[-1]
        if op.startswith("optimizer/"):
            n["opt"] += 1
        elif op.endswith(".recompute"):
            n["rec"] += 1
        elif "." in last:  # dgrad, wgrad, .bwd, .grad ...
            n["bwd"] += 1
        else:
            n["fwd"] += 1
    return n


def _per_layer(path: Path, phases: tuple[str, ...],
               recompute: str) -> list[tuple[str, dict, dict]]:  # fmt: skip
    """Per family of one file probed at two depths and holding `phases`: (model, per-layer
    kernels gpuperf predicts by phase under `recompute`, per-layer host µs by phase)."""
    data = read_json_object(path, "results file")
    by: dict[str, dict[int, dict]] = {}
    for run in data.get("runs", []):
        if "layers" in run and all(p in run.get("phases", {}) for p in phases):
            by.setdefault(run["model"], {})[int(run["layers"])] = run
    out = []
    for model, runs in sorted(by.items()):
        if len(runs) < 2:
            continue
        lo, hi = min(runs), max(runs)
        a, b = runs[lo], runs[hi]
        layers = hi - lo
        na = kernels_by_phase(a["config"], model, a["batch"], a["seq"], recompute)
        nb = kernels_by_phase(b["config"], model, b["batch"], b["seq"], recompute)
        dn = {k: (nb[k] - na[k]) / layers for k in na}
        dh = {k: (b["phases"][k]["host_ms"] - a["phases"][k]["host_ms"]) * 1e3 / layers
              for k in phases}  # fmt: skip
        out.append((model, dn, dh))
    return out


def pairs(path: Path) -> list[dict]:
    """Per family of one file: its per-layer host costs in no-grad forward kernels."""
    out = []
    for model, dn, dh in _per_layer(path, PHASES, "full"):
        per_kernel = dh["inf"] / dn["fwd"]  # µs per kernel of the no-grad forward
        out.append({
            "gpu": path.parent.name, "model": model, "inf_us_per_kernel": per_kernel,
            "fwd": dh["fwd"] / dn["fwd"] / per_kernel,
            "bwd": dh["bwd"] / dn["bwd"] / per_kernel,
            "recompute": (dh["ckpt_bwd"] - dh["bwd"]) / dn["rec"] / per_kernel,
            "ckpt_layer_kernels": (dh["ckpt_fwd"] - dh["fwd"]) / per_kernel,
        })  # fmt: skip
    return out


def sac_pairs(path: Path) -> list[dict]:
    """Per family of one train_host_sac.json (per-op checkpointing, torchtitan's policy): how
    much more a layer's forward costs the host under its dispatch mode (a factor on the plain
    forward), and a recomputed kernel (in no-grad forward kernels)."""
    out = []
    for model, dn, dh in _per_layer(path, ("inf", "fwd", "bwd", "sac_fwd", "sac_bwd"), "op"):
        per_kernel = dh["inf"] / dn["fwd"]
        out.append({
            "gpu": path.parent.name, "model": model, "inf_us_per_kernel": per_kernel,
            "sac_forward": dh["sac_fwd"] / dh["fwd"],
            "sac_recompute": (dh["sac_bwd"] - dh["bwd"]) / dn["rec"] / per_kernel,
        })  # fmt: skip
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 unless cost.py holds the medians")
    args = ap.parse_args(argv)
    rows = [r for path in sorted(RESULTS.glob("*/train_host.json")) for r in pairs(path)]
    if not rows:
        print("no train_host.json with two depths of a family", file=sys.stderr)
        return 1
    keys = ("inf_us_per_kernel", "fwd", "bwd", "recompute", "ckpt_layer_kernels")
    print(f"{'gpu':16s} {'model':12s} " + " ".join(f"{k:>18s}" for k in keys))
    for r in rows:
        print(f"{r['gpu']:16s} {r['model']:12s} " + " ".join(f"{r[k]:18.2f}" for k in keys))
    med = {k: statistics.median(r[k] for r in rows) for k in keys}
    print(f"{'median':29s} " + " ".join(f"{med[k]:18.2f}" for k in keys) + f"  ({len(rows)} pairs)")
    sac = [r for path in sorted(RESULTS.glob("*/train_host_sac.json")) for r in sac_pairs(path)]
    sac_keys = ("inf_us_per_kernel", "sac_forward", "sac_recompute")
    if sac:
        print(f"\n{'gpu':16s} {'model':12s} " + " ".join(f"{k:>18s}" for k in sac_keys))
        for r in sac:
            print(f"{r['gpu']:16s} {r['model']:12s} "
                  + " ".join(f"{r[k]:18.2f}" for k in sac_keys))  # fmt: skip
    med_sac = {k: statistics.median(r[k] for r in sac) for k in sac_keys} if sac else {}
    if sac:
        print(f"{'median':29s} " + " ".join(f"{med_sac[k]:18.2f}" for k in sac_keys)
              + f"  ({len(sac)} pairs)")  # fmt: skip
    if args.check:
        from gpuperf.step import cost

        want = {"HOST_RECOMPUTE_FACTOR": med["recompute"],
                "HOST_CKPT_LAYER_KERNELS": med["ckpt_layer_kernels"]}  # fmt: skip
        if sac:
            want |= {"HOST_SAC_FORWARD_FACTOR": med_sac["sac_forward"],
                     "HOST_SAC_RECOMPUTE_FACTOR": med_sac["sac_recompute"]}  # fmt: skip
        bad = [f"{k} is {getattr(cost, k)}, the probes say {v:.3g}" for k, v in want.items()
               if abs(getattr(cost, k) / v - 1) > 0.01]  # fmt: skip
        for line in bad:
            print(line, file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
