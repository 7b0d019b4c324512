"""Where the host's time goes in eager decode steps on a growing cache (each step a new length):
a Mixtral-shaped model and a Llama with the same attention and layer count, three steps each
under torch.profiler (CPU and CUDA). Writes decode_step_probe.json: per model the step times and
the host ops with the most self CPU time, summed over the profiled steps.

    python3 benchmarks/device/decode_step_probe.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_hf  # noqa: E402


def main() -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    llama = {**e2e_hf.load_config("llama3-8b"), "num_hidden_layers": 4}
    result = {"env": e2e_hf.env_stamp(), "models": []}
    for name, cfg in (("mixtral-4l", e2e_hf.load_config("mixtral-4l")), ("llama3-8b-4l", llama)):
        model = e2e_hf.build_model(cfg)
        model.eval()
        step, _ = e2e_hf.decode_step(model, 1, 1024)
        with torch.no_grad():
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1e3)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    step()
                torch.cuda.synchronize()
        host = [{"name": e.key[:120], "count": e.count, "self_us": e.self_cpu_time_total}
                for e in prof.key_averages()
                if e.device_type != torch.autograd.DeviceType.CUDA]  # fmt: skip
        host.sort(key=lambda r: -r["self_us"])
        per_step = sum(h["self_us"] for h in host) / 3e3
        row = {"model": name, "step_ms": times, "host_self_ms": per_step, "host_top": host[:30]}
        result["models"].append(row)
        print(
            name, [round(t, 1) for t in times], "host self per step", round(row["host_self_ms"], 1)
        )
        for h in host[:12]:
            print(f"   {h['count'] / 3:6.1f}/step {h['self_us'] / 3e3:7.2f} ms/step  {h['name']}")
        del model, step
        torch.cuda.empty_cache()
    (out / "decode_step_probe.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
