# The NCCL ring copy tail (gpuperf.perfmodel.comm): the probe on 2, 3 and 4 H200s, then 3-rank
# sweeps (a rank count the model was not fitted on). Run by the device tool from the repo root.
set -x
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=$OUT/h200-sxm-141gb
mkdir -p $D
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
for n in ${PROBE_RANKS:-2 3 4}; do
  timeout 120 torchrun --nproc_per_node $n benchmarks/device/nccl_tail_probe.py \
    $D/nccl_tail_probe_${n}gpu.json 2>&1 | grep -v "^W1\|OMP_NUM\|\*\*\*\*" | tail -20
done
timeout 330 python3 benchmarks/device/run_collectives.py $D --nproc 3 \
  --colls ${COLLS:-allreduce,allgather,reducescatter,broadcast,alltoall} 2>&1 | tail -40
ls -la $D
