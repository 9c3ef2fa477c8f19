#!/usr/bin/env bash
# The training workloads on a real CUDA machine (one GPU is enough), for what CPU emulation cannot show:
# the launch contract under torchrun on CUDA, NCCL's all-reduce, the DDP trainer's samples/s in bf16 and fp32,
# and the log lines NCCL and PyTorch print for two failures jobs/diagnose.py names (two ranks on one GPU, CUDA
# out of memory). Needs only torch (the workloads import nothing else). Not run by CI: no GPU there.
#
#   OUT=/tmp/gpu bash bench/gpu_check.sh      # each check's output in $OUT/<check>.txt, its exit status last
#   CHECKS='env train-*' bash bench/gpu_check.sh   # only the checks whose names match these patterns
# Results and what they showed: docs/performance.md, "GPUs".
set -uf  # -f: the patterns in CHECKS are matched against names, never expanded to files
OUT=${OUT:-/tmp/gpu_check}
CHECKS=${CHECKS:-*}
mkdir -p "$OUT"
cd "$(dirname "$0")/../jobs/workloads" || exit 2
check() {  # check NAME COMMAND...: run it, its output and exit status in $OUT/NAME.txt
    local name=$1 pattern wanted=
    shift
    for pattern in $CHECKS; do
        # shellcheck disable=SC2053  # the pattern is a glob on purpose
        [[ $name == $pattern ]] && wanted=1
    done
    [[ -n $wanted ]] || return 0
    echo "== $name: $*" >&2
    timeout 240 "$@" >"$OUT/$name.txt" 2>&1
    echo "exit $?" >>"$OUT/$name.txt"
}
check env bash -c 'nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.get_device_name(0))"'
# Azure ML's pytorch distribution sets NODE_RANK beside what torchrun sets.
NODE_RANK=0 check probe torchrun --nnodes 1 --nproc_per_node 1 --node_rank 0 --master_addr 127.0.0.1 \
    --master_port 29511 probe.py --expect pytorch
NCCL_DEBUG=INFO check allreduce torchrun --standalone --nproc_per_node 1 allreduce_perf.py -b 1M -e 1G -f 4
for precision in bf16 fp32; do
    for workers in 0 4; do
        check "train-$precision-w$workers" torchrun --standalone --nproc_per_node 1 train_ddp.py --precision "$precision" \
            --num-workers "$workers" --epochs 3 --samples 262144 --batch-size 2048 --features 512 --hidden 4096 \
            --checkpoint-dir "/tmp/ckpt-$precision-$workers"
    done
done
# A script that puts every rank on GPU 0 (LOCAL_RANK ignored): NCCL refuses the communicator.
NCCL_DEBUG=WARN check duplicate-gpu torchrun --standalone --nproc_per_node 2 --no-python \
    bash -c 'LOCAL_RANK=0 exec python3 allreduce_perf.py -b 1K -e 1K -w 0 -n 1 --init-timeout 60'
check cuda-oom python3 -c 'import torch; torch.empty(1 << 40, dtype=torch.uint8, device="cuda")'
