"""Serving-simulation speed: 10,000 requests simulated end to end (target <= 2 s on 2 cores),
for the engines and arrival patterns `gpuperf serve` offers. Includes building the step timer
(the engine's forwards at the token grid), as a user's command pays it.

    .venv/bin/python benchmarks/serve_speed.py
"""

from __future__ import annotations

import time

from gpuperf import api

TARGET_S = 2.0
CASES = [
    ("llama3-8b", "h100", "vllm", dict(rate=20.0)),
    ("llama3-8b", "h100", "vllm", dict(concurrency=128)),
    ("llama3-8b", "h100", "trtllm", dict(rate=20.0)),
    ("llama3-70b", "h100", "vllm", dict(rate=5.0, tp=4)),
    ("llama3-8b", "h100", "hf", dict(rate=5.0)),
]


def main() -> None:
    for model, gpu, engine, kw in CASES:
        start = time.perf_counter()
        rep = api.serve(model, gpu=gpu, engine=engine, isl="uniform:128:1024", osl="uniform:32:256",
                        requests=10_000, **kw)  # fmt: skip
        el = time.perf_counter() - start
        ok = "yes" if el <= TARGET_S else "NO"
        args = ", ".join(f"{k}={v}" for k, v in kw.items())
        print(f"{model:11s} {engine:7s} {args:18s} 10,000 requests, {rep.summary['steps']:7,} "
              f"steps: {el:5.2f} s (target <= {TARGET_S:.0f} s: {ok})")  # fmt: skip


if __name__ == "__main__":
    main()
