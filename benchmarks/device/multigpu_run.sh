# Whole models as parallel plans on 2 and 4 H200s, and the collectives they issue (issues 12, 16).
# Run by the device tool from the repo root on a machine of 4 H200s:
#   GROUPS=2gpu BUDGET=480 bash benchmarks/device/multigpu_run.sh   (then GROUPS=4gpu ...)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
D=$OUT/h200-sxm-141gb
mkdir -p $D
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.device_count())"
if [ -n "$COLL" ]; then
  timeout 150 python3 benchmarks/device/plan_collectives.py $D --nproc $COLL 2>&1 | tail -30
fi
timeout ${BUDGET_HARD:-560} python3 benchmarks/device/multigpu_validate.py $D --groups ${GROUPS:-2gpu} \
  --budget-s ${BUDGET:-480} 2>&1 | grep -v "^W1\|OMP_NUM\|\*\*\*\*" | tee $D/log_${GROUPS:-2gpu}.txt | tail -60
ls -la $D
