# Whole models as parallel plans on 2 and 4 H200s, and the collectives they issue (issues 12, 16).
# Run by the device tool from the repo root on a machine of 4 H200s, e.g.
#   COLL=2,4 PLANS=2gpu BUDGET=480 bash benchmarks/device/multigpu_run.sh
#   MATCH="tp4 .* decode" PROFILE=--profile PLANS=2gpu bash benchmarks/device/multigpu_run.sh
# (PLANS, not GROUPS: bash keeps the user's group ids in GROUPS.)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
D=$OUT/h200-sxm-141gb
mkdir -p $D
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv
if [ -n "$COLL" ]; then
  timeout 150 python3 benchmarks/device/plan_collectives.py $D --nproc $COLL 2>&1 | tail -30
fi
for plans in ${PLANS:-2gpu}; do
  pkill -9 -f gpuperf.measure.model_worker; sleep 1  # nothing left over from a killed run
  timeout ${BUDGET_HARD:-560} python3 benchmarks/device/multigpu_validate.py $D --groups $plans \
    --budget-s ${BUDGET:-480} ${PROFILE:-} ${MATCH:+--match "$MATCH"} 2>&1 \
    | grep -v "^W1\|OMP_NUM\|\*\*\*\*" | tee -a $D/log_multigpu.txt | tail -40
done
ls -la $D
