"""Which masked SDPA shapes does cuDNN plan anew? Hugging Face continuous batching runs one
masked SDPA per layer over the step's queries and every cached key (a gathered, masked call),
and the first call at a shape the process has not met pays cuDNN's plan (tens of ms). This times
the host side of the first call at many key counts near each other, in one process, to see
which key counts share a plan (exact count, or buckets of it), and whether the query count and
the mask's dtype are part of the key.

    python3 benchmarks/device/sdpa_plan_key_probe.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

OFFSETS = (0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256,
           257, 511, 512, 513, 1000, 1024, 1025)  # fmt: skip


def _call_ms(torch, F, q_len: int, kv: int, hd: int, mask_dtype) -> float:  # noqa: ANN001
    q = torch.randn(1, 32, q_len, hd, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 32, kv, hd, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    if mask_dtype is torch.bool:
        mask = torch.ones(1, 1, q_len, kv, device="cuda", dtype=torch.bool)
    else:
        mask = torch.zeros(1, 1, q_len, kv, device="cuda", dtype=mask_dtype)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    return ms


def main() -> None:
    import torch
    import torch.nn.functional as F

    from gpuperf.measure.env import environment

    out: dict = {"env": environment("cuda"), "kind": "sdpa_plan_key_probe", "series": []}
    _call_ms(torch, F, 8, 100, 64, torch.bool)  # load the library and its handles
    for hd, q_len, mask_name, base in (
        (64, 16, "bool", 7000),
        (128, 16, "bool", 9000),
        (128, 16, "bf16", 11000),
        (128, 64, "bool", 13000),
    ):
        mask_dtype = torch.bool if mask_name == "bool" else torch.bfloat16
        rows = []
        for rep in range(2):
            for off in OFFSETS:
                ms = _call_ms(torch, F, q_len, base + off, hd, mask_dtype)
                rows.append({"pass": rep, "kv": base + off, "host_ms": round(ms, 3)})
        # the same key counts with one query more: is the query count in the key?
        for off in OFFSETS[:6]:
            ms = _call_ms(torch, F, q_len + 1, base + off, hd, mask_dtype)
            rows.append({"pass": 2, "q": q_len + 1, "kv": base + off, "host_ms": round(ms, 3)})
        out["series"].append({"head_dim": hd, "queries": q_len, "mask": mask_name, "rows": rows})
        new = [r["host_ms"] for r in rows if r["pass"] == 0]
        print(
            f"hd{hd} q{q_len} {mask_name}: first pass " + " ".join(f"{x:.1f}" for x in new),
            flush=True,
        )
        print("   second pass " + " ".join(f"{r['host_ms']:.1f}" for r in rows if r["pass"] == 1))
        print("   q+1 " + " ".join(f"{r['host_ms']:.1f}" for r in rows if r["pass"] == 2))
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
