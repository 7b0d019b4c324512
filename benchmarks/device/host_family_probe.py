"""What one decoder layer of each Hugging Face family costs the host, in an eager decode step and
an eager prefill forward.

Every family's modeling code runs its own Python around the same kinds of kernels: on one H100
host the eager decode steps of eleven families spent 20-47 µs per kernel gpuperf predicts
(sdpa_decode_probe_families.json, lengths met before: no cuDNN plan), Llama, Qwen3 and both
Gemmas about 21 µs, GPT-2, Pythia and Nemotron 26-28 µs, Qwen2, Phi-3, Falcon and GPT-BigCode
39-47 µs. Made tiny (width 256: the GPU idles between kernels) and built at two depths, 2 and
10 layers, the difference of the two step times is eight layers' host time without the model
call's own (its masks, rotary table, output handling).

    python3 benchmarks/device/host_family_probe.py OUT_DIR [--families a,b] [--rounds N]

Writes OUT_DIR/host_family.json: per family and depth, the host time of an eager decode step on
a DynamicCache of CTX tokens (on lengths the process has met before: the cache grown and cropped
back, so cuDNN plans nothing) and of a no-grad prefill forward of SEQ tokens, each call from an
idle GPU, N calls each (median, samples kept). The calls run in rounds, every family and depth
once per round, so a host whose speed drifts during the run (HF probe steps of one H100 host
went 38 -> 26 -> 40 ms over two minutes) moves them all alike. Also the machine's launch costs
and its Hugging Face probe step (e2e_hf.py), which place it in the host pool.
benchmarks/host_family_fit.py turns the files into each family's ratio to Llama's host per
kernel, which gpuperf does not charge (that script says why). A first version timed each entry's
calls back to back, one entry after another, at 2 and 6 layers: on a host that drifted, two
passes in one call disagreed by up to 3x in these ratios (not committed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_hf  # noqa: E402  (this folder)

# Dense families the loader accepts, one model each (e2e_hf.CONFIGS), and the MoE ones for the
# record (their MoE blocks have their own host factor: gpuperf.step.cost.HF_MOE_HOST).
DENSE = ("llama3-8b", "mistral-7b-8l", "qwen2-7b-8l", "qwen3-8b", "gemma2-9b-6l", "gemma-3-1b",
         "phi-3-mini", "falcon-7b", "falcon-40b-4l", "minitron-8b", "starcoder", "gpt2-xl",
         "pythia-6.9b")  # fmt: skip
MOE = ("mixtral-4l", "qwen3-moe-8l", "qwen1.5-moe-8l")
DEPTHS = (2, 10)
CTX, SEQ = 64, 64


def host_once(fn) -> float:  # noqa: ANN001
    """Host ms of one call of fn from an idle GPU (Python returns before the GPU finishes)."""
    e2e_hf.sync()
    t0 = time.perf_counter()
    fn()
    dt = (time.perf_counter() - t0) * 1e3
    e2e_hf.sync()
    return dt


class Entry:
    """One family at one depth: its model, a prefill call and a decode step on a DynamicCache
    whose lengths CTX+1 .. CTX+rounds+2 were each met once before the rounds (cuDNN has planned
    them all)."""

    def __init__(self, name: str, layers: int, rounds: int) -> None:
        import torch

        self.name, self.layers = name, layers
        self.cfg = e2e_hf.tiny_layers(name, layers)
        self.model = e2e_hf.build_model(self.cfg)
        self.model.eval()
        ids = torch.randint(0, self.model.config.vocab_size, (1, SEQ), device=e2e_hf.DEV)
        self.prefill = lambda: self.model(input_ids=ids, use_cache=False, logits_to_keep=1)
        self.decode, self.cache = e2e_hf.decode_step(self.model, 1, CTX)
        with torch.no_grad():
            for _ in range(rounds + 2):
                self.decode()
            self.prefill()
        self.cache.crop(-(rounds + 2))
        with torch.no_grad():  # two warm-up calls each, on lengths met before
            for _ in range(2):
                self.decode()
                self.prefill()
        self.samples: dict[str, list[float]] = {"decode": [], "prefill": []}

    def record(self) -> dict:
        return {"model": self.name, "layers": self.layers, "config": self.cfg, "ctx": CTX,
                "seq": SEQ,
                **{f"{k}_host_ms": statistics.median(v) for k, v in self.samples.items()},
                **{f"{k}_samples_ms": v for k, v in self.samples.items()}}  # fmt: skip


def probe_all(names: list[str], rounds: int) -> list[dict]:
    """Every family at both depths, timed in rounds: one decode step and one prefill of each
    entry per round, so a host that drifts during the run moves every entry alike."""
    import torch

    entries, out = [], []
    for name in names:
        for layers in DEPTHS:
            t0 = time.time()
            try:
                entries.append(Entry(name, layers, rounds))
            except Exception as exc:  # noqa: BLE001 - record and go on
                out.append({"model": name, "layers": layers,
                            "error": f"{type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc()[-2000:]})  # fmt: skip
            print(name, layers, f"built in {time.time() - t0:.1f} s", flush=True)
    with torch.no_grad():
        for _ in range(rounds):
            for e in entries:
                e.samples["decode"].append(host_once(e.decode))
                e.samples["prefill"].append(host_once(e.prefill))
    return [e.record() for e in entries] + out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="directory for host_family.json")
    ap.add_argument("--families", default=",".join(DENSE + MOE))
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test")
    args = ap.parse_args()
    e2e_hf.DEV = args.device
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "host_family.json"
    result = e2e_hf.probe_file(ctx=CTX, seq=SEQ)
    result["runs"] = probe_all(args.families.split(","), args.rounds)
    for run in result["runs"]:
        got = [round(run.get(f"{k}_host_ms", -1), 2) for k in ("decode", "prefill")]
        print(run["model"], run["layers"], *got, run.get("error", ""), flush=True)
    e2e_hf._probe_hf(result, "hf_probe_end")
    path.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
