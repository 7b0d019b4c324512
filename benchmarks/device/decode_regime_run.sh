# Eager DynamicCache decode, step by step (benchmarks/device/decode_regime_probe.py), on one GPU.
set -x
D=$OUT/${GPU_DIR:-h200-sxm-141gb}
mkdir -p $D
P=benchmarks/device/decode_regime_probe.py
timeout 200 python3 $P $D/decode_regime_llama2-7b_b1.json --batch 1 2>&1 | grep -v Warning | tail -30
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 150 python3 $P \
  $D/decode_regime_llama2-7b_b1_expandable.json --batch 1 --tag "expandable segments, " 2>&1 | grep -v Warning | tail -30
timeout 150 python3 $P $D/decode_regime_llama2-7b_b16.json --batch 16 --steps 20 2>&1 | grep -v Warning | tail -30
ls -la $D
