"""Host cost of an SDPA call on a shape it has not seen, by backend. Run from the repo root:

    python3 benchmarks/device/sdpa_shape_probe.py OUT.json

Eager decode on a growing KV cache meets a new kv length every step. Steps on lengths seen before
took 15 ms and on new ones 41 ms (H200, Llama-2-7B, batch 1; e2e_eager_host.json), with the host
CPU at its usual speed. This probe calls F.scaled_dot_product_attention alone, decode-shaped
(q_len 1, bf16, head dim 128), on NEW kv lengths (one call each) and then on lengths already seen,
under each backend (cuDNN, flash, efficient, and the default choice), and records the host time of
each call (perf_counter around the call, then a sync outside the timed span) and its GPU time.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CASES = (  # batch, q heads, kv heads (SDPA sees kv heads already repeated, as HF passes them)
    (1, 32, 32),
    (16, 32, 32),
)
NEW = 12  # new kv lengths per backend and case


def main() -> int:
    import torch
    import torch.nn.functional as F
    from e2e_hf import env_stamp
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = Path(sys.argv[1])
    backends = {
        "default": None,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
    result: dict = {"env": env_stamp(), "kind": "sdpa_shape_probe", "rows": []}
    base = 2048
    for b, hq, hkv in CASES:
        for name, be in backends.items():
            base += 1000  # lengths never used before in this process, for each backend
            rows = []
            for seen in (False, True):
                for i in range(NEW):
                    kv = base + i
                    q = torch.randn(b, hq, 1, 128, device="cuda", dtype=torch.bfloat16)
                    k = torch.randn(b, hkv, kv, 128, device="cuda", dtype=torch.bfloat16)
                    v = torch.randn_like(k)
                    torch.cuda.synchronize()
                    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
                    t0 = time.perf_counter()
                    ev[0].record()
                    try:
                        if be is None:
                            F.scaled_dot_product_attention(q, k, v)
                        else:
                            with sdpa_kernel(be):
                                F.scaled_dot_product_attention(q, k, v)
                    except RuntimeError as exc:
                        rows.append({"backend": name, "error": str(exc)[:200]})
                        break
                    ev[1].record()
                    host = (time.perf_counter() - t0) * 1e3
                    torch.cuda.synchronize()
                    rows.append({"backend": name, "batch": b, "heads": hq, "kv_len": kv,
                                 "seen_before": seen, "host_ms": host,
                                 "event_ms": ev[0].elapsed_time(ev[1])})  # fmt: skip
            result["rows"] += rows
            for seen in (False, True):
                h = [r["host_ms"] for r in rows if r.get("seen_before") is seen]
                if h:
                    print(f"b{b} {name:9s} {'seen' if seen else 'new '} kv: host median "
                          f"{statistics.median(h):7.3f} ms  {[round(x, 2) for x in h]}",
                          flush=True)  # fmt: skip
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
