"""What one Hugging Face decoder layer keeps for backward, measured: eager and compiled.

The memory model's count of a layer's saved activations (gpuperf.step.memory._saved_per_layer)
matched eager Hugging Face training steps within a few percent, but compiled steps without
checkpointing at 8K tokens with a sliding window measured 2.1-2.3 GiB above it (about 270 MB a
windowed layer; e2e_validate_windows_masked.json). This finds what they keep: each family's
config with 1 and then 2 decoder layers (random bf16 weights, batch 1), each layer compiled as
`gpuperf validate --impl compile` compiles it (gpuperf.measure.layer_wrap) or eager, one
training forward after warm-up steps; the bytes allocated after the forward less before it, the
2-layer model's less the 1-layer model's, is one layer's saved bytes (the embedding, head and
loss cancel). The tensors the second model's forward left alive are listed by size, each with
the frames that allocated it (torch.cuda.memory._record_memory_history), largest first.

    python3 benchmarks/device/saved_memory_probe.py OUT_DIR [--only phi3:4096,...]
        [--budget-s 480]

Writes OUT_DIR/saved_memory.json after every case: env, and per case the family, seq, impl,
the per-layer saved bytes, each model's bytes after its forward, and the 2-layer forward's
alive tensors (size, requested size, top frames).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import validate_families as vf  # noqa: E402

from gpuperf.fileio import write_text  # noqa: E402

CASES = [  # family:seq (windows: phi3 2047, mistral 4096, starcoder2 4096, gemma3 1024)
    "mistral:2048",  # below its window: no mask (the control)
    "mistral:8192",
    "starcoder2:8192",
    "gemma3:8192",
    "phi3:4096",
]
# Small configs of the fused q/k/v layouts the families above leave out (hidden 1024, 16 heads,
# random weights): Falcon's new decoder (K and V picked from the projection by a list index),
# GPT-NeoX with parallel and with sequential residual (a quarter of each head rotated), Phi-3
# with half of each head rotated.
_SMALL = {"hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 512}
SYNTHETIC = {
    "falcon_new": {**_SMALL, "model_type": "falcon", "num_kv_heads": 4,
                   "new_decoder_architecture": True, "parallel_attn": True, "alibi": False,
                   "bias": False, "attention_dropout": 0.0, "hidden_dropout": 0.0},
    "neox_parallel": {**_SMALL, "model_type": "gpt_neox", "intermediate_size": 4096,
                      "rotary_pct": 0.25, "use_parallel_residual": True,
                      "attention_dropout": 0.0, "hidden_dropout": 0.0},
    "neox_sequential": {**_SMALL, "model_type": "gpt_neox", "intermediate_size": 4096,
                        "rotary_pct": 0.25, "use_parallel_residual": False,
                        "attention_dropout": 0.0, "hidden_dropout": 0.0},
    "phi3_partial": {**_SMALL, "model_type": "phi3", "num_key_value_heads": 4,
                     "intermediate_size": 4096, "partial_rotary_factor": 0.5,
                     "pad_token_id": 0, "sliding_window": None},
}  # fmt: skip
IMPLS = ("compile", "eager")
KEEP_FRAMES = 4
MIN_LISTED = 1 << 20  # tensors of at least this many bytes are listed


def _frames(block: dict) -> list[str]:
    """The allocating frames worth reading: Inductor's generated code, transformers' modeling
    code, torch's functional and autograd entry points."""
    out = []
    for f in block.get("frames", []) or []:
        name = f.get("filename", "")
        if any(k in name for k in ("torchinductor", "modeling_", "functional.py", "autograd",
                                   "masking_utils", "sdpa_attention", "_tensor.py")):  # fmt: skip
            out.append(f"{Path(name).name}:{f.get('line')}:{f.get('name')}")
        if len(out) >= KEEP_FRAMES:
            break
    return out


def _config(fam: str, out: Path, layers: int) -> tuple[Path, dict]:
    """The case's config.json with `layers` layers: a family's (validate_families) or a small
    SYNTHETIC one; and its contents."""
    if fam not in SYNTHETIC:
        src = vf.source(fam) if fam in vf.FAMILIES else vf.CONFIGS / f"{fam}.json"
        path = vf.config(src, out, layers)
        return path, json.loads(path.read_text())
    d = {**SYNTHETIC[fam], "num_hidden_layers": layers}
    path = out / f"{fam}-{layers}l.json"
    write_text(path, json.dumps(d, indent=1))
    return path, d


def _alive(torch) -> dict[int, dict]:  # noqa: ANN001
    snap = torch.cuda.memory._snapshot()
    blocks = {}
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                blocks[b["address"]] = b
    return blocks


def forward_saved(path: Path, seq: int, impl: str, listing: bool, recompute: str = "none") -> dict:
    """Bytes alive after one training forward of the config at `path` (less before it)."""
    import torch
    from transformers import AutoConfig

    from gpuperf.measure.hf_causal import causal_lm
    from gpuperf.measure.layer_wrap import wrap_layers

    torch._dynamo.reset()  # each case compiles afresh (no recompile limit carried over)
    cfg = AutoConfig.from_pretrained(str(path))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = causal_lm(cfg).to(torch.bfloat16)
    model.train()
    wrap_layers(model, recompute, compile_layers=impl == "compile")
    ids = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda")
    for _ in range(2):  # compilation and the allocator's warm-up
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    gc.collect()
    before = torch.cuda.memory_allocated()
    if listing:
        torch.cuda.memory._record_memory_history(max_entries=200000)
        old = _alive(torch)
    torch.cuda.reset_peak_memory_stats()
    out = model(input_ids=ids, labels=ids, use_cache=False)
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated()
    peak = torch.cuda.max_memory_allocated()
    tensors = []
    if listing:
        new = {a: b for a, b in _alive(torch).items() if a not in old}
        for b in sorted(new.values(), key=lambda b: -b["size"]):
            if b["size"] >= MIN_LISTED:
                tensors.append({"size": b["size"], "requested": b.get("requested_size"),
                                "frames": _frames(b)})  # fmt: skip
        torch.cuda.memory._record_memory_history(enabled=None)
    backward: dict = {}
    if listing:  # the backward's peak above the forward's end, and what was alive at it
        torch.cuda.memory._record_memory_history(max_entries=400000)
        torch.cuda.reset_peak_memory_stats()
    out.loss.backward()
    if listing:
        torch.cuda.synchronize()
        backward = _backward_peak(torch, torch.cuda.max_memory_allocated() - after)
        torch.cuda.memory._record_memory_history(enabled=None)
    del out, model, ids
    gc.collect()
    torch.cuda.empty_cache()
    return {"forward_bytes": after - before, "forward_peak_bytes": peak - before,
            "tensors": tensors, "backward": backward}  # fmt: skip


def _backward_peak(torch, peak_bytes: int) -> dict:  # noqa: ANN001
    """The backward's peak above the forward's end (bytes), and the tensors it had allocated
    that were alive at that moment, from the allocator's trace (largest first)."""
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    live: dict[int, dict] = {}
    cur = top = 0
    at_top: list[dict] = []
    for ev in trace:
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
            cur += ev["size"]
            if cur > top:
                top, at_top = cur, list(live.values())
        elif ev["action"] in ("free_requested", "free") and ev["addr"] in live:
            cur -= live.pop(ev["addr"])["size"]
    listed = [
        {"size": e["size"], "frames": _frames(e)}
        for e in sorted(at_top, key=lambda e: -e["size"])
        if e["size"] >= MIN_LISTED
    ]
    return {"peak_bytes": peak_bytes, "traced_peak_bytes": top, "tensors": listed}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument(
        "--recompute",
        default="none",
        choices=("none", "op", "full"),
        help="each layer checkpointed so (gpuperf.measure.layer_wrap)",
    )
    ap.add_argument("--name", default="saved_memory.json")
    args = ap.parse_args()
    (args.out / "configs").mkdir(parents=True, exist_ok=True)
    dest = args.out / args.name
    result: dict = {"note": __doc__.split("\n\n")[1].replace("\n", " "), "env": vf.env(),
                    "cases": []}  # fmt: skip
    start = time.monotonic()
    for case in args.only.split(","):
        fam, seq = case.split(":")
        for impl in args.impls.split(","):
            tag = f"{fam} {seq} {impl}"
            if time.monotonic() - start > args.budget_s:
                result.setdefault("skipped", []).append(tag)
                continue
            t0 = time.monotonic()
            try:
                one_path, _ = _config(fam, args.out / "configs", 1)
                two_path, hf = _config(fam, args.out / "configs", 2)
                one = forward_saved(one_path, int(seq), impl, False, args.recompute)
                two = forward_saved(two_path, int(seq), impl, True, args.recompute)
            except Exception:  # noqa: BLE001 (one case's failure is recorded, the rest go on)
                result.setdefault("failed", []).append(
                    {"case": tag, "error": traceback.format_exc().splitlines()[-3:]}
                )
                print(f"{tag}: FAILED")
                continue
            layer = two["forward_bytes"] - one["forward_bytes"]
            result["cases"].append({
                "family": fam, "config": vf.FAMILIES.get(fam, fam), "seq": int(seq), "batch": 1,
                "hf_config": hf,
                "impl": impl, "recompute": args.recompute, "layer_saved_bytes": layer,
                "one_layer": {k: v for k, v in one.items() if k not in ("tensors", "backward")},
                "two_layers": {k: v for k, v in two.items() if k not in ("tensors", "backward")},
                "two_layers_tensors": two["tensors"], "two_layers_backward": two["backward"],
                "wall_s": time.monotonic() - t0,
            })  # fmt: skip
            print(f"{tag:24s} one layer keeps {layer / 2**20:8.1f} MiB "
                  f"({time.monotonic() - t0:.0f} s)")  # fmt: skip
            write_text(dest, json.dumps(result, indent=1))
    write_text(dest, json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
