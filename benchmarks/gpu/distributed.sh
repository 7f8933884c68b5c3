#!/usr/bin/env bash
# Sharded LocalBackend training on a machine with several CUDA GPUs: the checks the CPU suite
# cannot make (NCCL, CUDA devices, bfloat16 LoRA weights, a dead rank under NCCL), then the
# step-time benchmark on N GPUs against one.
#
#   benchmarks/gpu/distributed.sh          # every visible GPU (at least 2)
#   benchmarks/gpu/distributed.sh 4        # the first 4
#
# Run it from the repository root, in an environment with arthex installed with a CUDA build
# of torch (`pip install -e ".[dev]"` after torch's CUDA wheel). It prints the benchmark's
# table; paste it into docs/backends/local.md under "What to expect on GPUs".
set -euo pipefail

PYTHON=${PYTHON:-python}
visible=$("$PYTHON" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
ranks=${1:-$visible}
if [ "$visible" -lt 2 ] || [ "$ranks" -lt 2 ] || [ "$ranks" -gt "$visible" ]; then
    echo "needs at least 2 CUDA GPUs and at most the $visible visible ones (asked for $ranks)" >&2
    exit 1
fi
"$PYTHON" -c "import torch, torch.distributed as d; assert d.is_nccl_available(), 'torch without NCCL'; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'NCCL', '.'.join(map(str, torch.cuda.nccl.version())))"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true

echo "== NCCL: equivalence, portability and a killed rank"
"$PYTHON" -m pytest -q -p no:randomly -m gpu tests/e2e/test_local_distributed_gpu.py

echo "== the CPU (gloo) suite of sharded training, on this machine too"
"$PYTHON" -m pytest -q -p no:randomly tests/e2e/test_local_distributed.py tests/faults/test_distributed_faults.py

echo "== step time: 1 GPU against $ranks, and the communication share"
"$PYTHON" -m benchmarks.bench_distributed --device cuda --ranks "$ranks" --models 3M,20M --rounds 5
