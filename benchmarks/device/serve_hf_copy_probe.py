"""Which tensor copies a Hugging Face continuous-batching step runs, with their shapes: 16
requests of 512 tokens, 32 new tokens each, through generate_batch under torch.profiler with
record_shapes, for random-weight models (default phi-3-mini, as e2e_hf.py builds it, and
llama3-8b). Writes, per model, the CPU ops that launch copies (aten::copy_, aten::clone,
aten::contiguous, aten::reshape, aten::index_select, aten::masked_scatter_ ...) grouped by
their input shapes, with their CUDA time (each op's own kernels and its children's).

    python3 benchmarks/device/serve_hf_copy_probe.py OUT.json [MODEL ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_hf_profile import warmed  # noqa: E402

OPS = ("aten::copy_", "aten::clone", "aten::contiguous", "aten::reshape", "aten::index_select",
       "aten::expand", "aten::_reshape_alias", "aten::transpose", "aten::empty_like",
       "aten::masked_scatter_", "aten::index_copy_", "aten::cat", "aten::to", "aten::_to_copy",
       "aten::scaled_dot_product_attention",
       "aten::_scaled_dot_product_cudnn_attention")  # fmt: skip


def main() -> None:
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile

    from gpuperf.measure.env import environment

    out = {"env": {**environment("cuda"), "transformers": transformers.__version__}, "runs": []}
    for name in sys.argv[2:] or ("phi-3-mini", "llama3-8b"):
        model, prompts, gc, cbc = warmed(name, 16, 32, torch)
        # generate_batch runs the model on its manager's thread: profile every thread
        threads = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     record_shapes=True,
                     experimental_config=threads) as prof:  # fmt: skip
            model.generate_batch(inputs=prompts, generation_config=gc,
                                 continuous_batching_config=cbc, progress_bar=False)  # fmt: skip
            torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages(group_by_input_shape=True):
            if e.key not in OPS:
                continue
            dev = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
            rows.append({"op": e.key, "count": e.count, "device_us": dev,
                         "shapes": str(e.input_shapes)[:300]})  # fmt: skip
        rows.sort(key=lambda r: -r["device_us"])
        totals = {e.key: (e.count, getattr(e, "device_time_total", 0)) for e in prof.key_averages()
                  if e.key in OPS}  # fmt: skip
        out["runs"].append({"model": name, "ops": rows, "totals": totals})
        Path(sys.argv[1]).write_text(json.dumps(out))
        print(name, flush=True)
        for op, (count, dev) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
            print(f"  {dev:10.0f} us {count:7d} {op}")
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
