#!/usr/bin/env bash
# An external trainer's own launch over its Slurm allocation, as docs/launch.md gives it: one
# torchrun per node (srun), the nodes meeting at the allocation's first host through a c10d
# rendezvous. Run from the job's first task (the `command` trainer's `self` launcher).
# Usage: srun_torchrun.sh PROCS_PER_NODE PYTHON MODULE_OR_SCRIPT ARGS...
set -euo pipefail
per_node=$1 python=$2; shift 2
master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=$((20000 + (SLURM_JOB_ID + 7) % 20000))
exec srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" \
  --ntasks-per-node=1 "$python" -m torch.distributed.run --nnodes="$SLURM_JOB_NUM_NODES" \
  --nproc_per_node="$per_node" --rdzv_backend=c10d --rdzv_endpoint="$master:$port" \
  --rdzv_id="$SLURM_JOB_ID" "$@"
