"""Whether Hugging Face continuous batching pays for a sliding window it never reaches: Mistral-7B
(sliding_window 4096) served as-is and with sliding_window removed (every layer then takes the
full-attention cache path), the same requests, prompts shorter than the window.

transformers 5.17's PagedAttentionCache.update gives a sliding-window layer its own read path
(index_select, then masked_scatter_ of the new keys and values into the gathered cache, then
index_copy) and builds a second attention mask per step; a full-attention layer copies, then
gathers. Writes OUT.json (serve_hf's format, one run per variant).

    python3 benchmarks/device/serve_hf_swa_probe.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_hf import CB, config, fixed  # noqa: E402

from gpuperf.measure.serve_hf import run  # noqa: E402


def main() -> None:
    path = Path(sys.argv[1])
    base = config("mistral-7b")
    results: dict = {"kind": "serve_hf_swa_probe", "runs": []}
    flat = {**base, "sliding_window": None}
    variants = (
        ("mistral-7b_n64_512x128_window", base),
        ("mistral-7b_n64_512x128_nowindow", flat),
        ("mistral-7b_n16_512x128_window", base),
        ("mistral-7b_n16_512x128_nowindow", flat),
    )
    for label, cfg in variants:
        n = 64 if "_n64_" in label else 16
        spec = {"config": cfg, "requests": fixed(n, 512, 128), "cb": dict(CB), "dtype": "bf16",
                "seed": 0, "label": label, "preset": "mistral-7b", "concurrency": 0}  # fmt: skip
        start = time.perf_counter()
        out = run(spec)
        out["preset"], out["error"] = "mistral-7b", None
        out["sliding_window"] = cfg.get("sliding_window")
        out["wall_s"] = time.perf_counter() - start
        results["runs"].append(out)
        results["env"] = out.get("env")
        path.write_text(json.dumps(results))
        last = max(r["last_s"] or 0 for r in out["requests"])
        print(f"{label}: {n} requests in {last:.2f} s", flush=True)


if __name__ == "__main__":
    main()
