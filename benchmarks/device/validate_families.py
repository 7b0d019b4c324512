"""Whole-model training steps of other families through `gpuperf validate`, as a user runs it.
Run from the repository root on one GPU:

    python3 benchmarks/device/validate_families.py OUT_DIR [--only granite,phi3] [--budget-s 540]

Each family's Hugging Face config (tests/unit/data/hf_configs) with 8 layers, random bf16
weights, batch 2 x 2048, eager or each decoder layer compiled, checkpointed whole or by
torchtitan's per-op policy (gpuperf.measure.layer_wrap): `gpuperf validate CONFIG --mode train
--nproc 1 ...` in a subprocess, its --save output kept. Writes OUT_DIR/e2e_validate_families.json
after every run (the environment, then each run as validate saved it: config, scenario,
measured steps, peak memory and the prediction it printed beside them). A run that fails
records its error and the others go on; runs that would start after --budget-s are skipped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuperf.fileio import write_text  # noqa: E402

CONFIGS = ROOT / "tests" / "unit" / "data" / "hf_configs"
PRESETS = ROOT / "gpuperf" / "workloads" / "presets"
FAMILIES = {  # name: config file (a bundled test config, else a preset)
    "granite": "granite-3.1-8b",
    "phi3": "phi-3-mini-4k-instruct",
    "starcoder2": "starcoder2-7b",
    "olmo2": "olmo2-7b",
    "mistral": "mistral-7b",  # v0.1: a 4,096-token window
    "gemma3": "gemma-3-4b-pt",  # 1,024-token windows on five layers of six
}
VARIANTS = [("eager", "full"), ("compile", "none"), ("compile", "op"), ("eager", "op"),
            ("compile", "full")]  # fmt: skip
LAYERS, BATCH, SEQ = 8, 2, 2048  # the defaults


def source(fam: str) -> Path:
    path = CONFIGS / f"{FAMILIES[fam]}.json"
    return path if path.exists() else PRESETS / f"{FAMILIES[fam]}.json"


def config(path: Path, out: Path, layers: int) -> Path:
    d = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    if "text_config" in d:  # a multimodal checkpoint's language model (Gemma-3)
        d = {**d["text_config"], "model_type": d["text_config"].get("model_type", d["model_type"])}
    d["num_hidden_layers"] = layers
    dest = out / f"{path.stem}-{layers}l.json"
    write_text(dest, json.dumps(d, indent=1))
    return dest


def env() -> dict:
    from importlib.metadata import version

    from gpuperf.measure.env import environment

    return {**environment(), "transformers": version("transformers")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", default=",".join(FAMILIES))
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--variants", default=",".join(f"{i}:{r}" for i, r in VARIANTS),
                    help="impl:recompute pairs")  # fmt: skip
    ap.add_argument("--name", default="e2e_validate_families.json")
    args = ap.parse_args()
    variants = [tuple(v.split(":")) for v in args.variants.split(",")]
    out = args.out
    (out / "configs").mkdir(parents=True, exist_ok=True)
    dest = out / args.name
    result: dict = {
        "note": f"gpuperf validate CONFIG --mode train --nproc 1 --batch {args.batch} --seq "
        f"{args.seq} (each family's config with {args.layers} layers, random bf16 weights), "
        "predictions committed before the run (benchmarks/device/validate_families.py)",
        "env": env(),
        "runs": [],
    }
    start = time.monotonic()
    for fam in args.only.split(","):
        cfg = config(source(fam), out / "configs", args.layers)
        for impl, rc in variants:
            tag = f"{fam} {impl} {rc}"
            if time.monotonic() - start > args.budget_s:
                result.setdefault("skipped", []).append(tag)
                continue
            save = out / "runs" / f"{fam}_{impl}_{rc}.json"
            save.parent.mkdir(exist_ok=True)
            cmd = [sys.executable, "-m", "gpuperf", "validate", str(cfg), "--mode", "train",
                   "--nproc", "1", "--impl", impl, "--recompute", rc, "--batch", str(args.batch),
                   "--seq", str(args.seq), "--format", "json", "--save", str(save)]  # fmt: skip
            t0 = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=240)
            wall = time.monotonic() - t0
            if p.returncode == 0 and save.exists():
                run = json.loads(save.read_text())
                run = run["runs"][0] if "runs" in run else run
                run["model"] = f"{FAMILIES[fam]}-{args.layers}l"
                run["wall_s"] = wall
                peak = run.get("peak_memory_bytes")  # per rank: the accuracy tables' GiB
                if peak:
                    run["peak_mem_gib"] = max(peak if isinstance(peak, list) else [peak]) / 2**30
                result["runs"].append(run)
                print(f"{tag:28s} measured {run['measured_ms']:8.1f} ms  predicted "
                      f"{run.get('predicted_ms', float('nan')):8.1f} ms  "
                      f"{run.get('error_pct', float('nan')):+6.1f}%  ({wall:.0f} s)")  # fmt: skip
            else:
                err = (p.stderr or p.stdout).strip().splitlines()[-3:]
                result.setdefault("failed", []).append({"run": tag, "error": err})
                print(f"{tag:28s} FAILED ({wall:.0f} s): {' | '.join(err)}")
            write_text(dest, json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
