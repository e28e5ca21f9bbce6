#!/usr/bin/env bash
# Every check that needs a GPU, in one run on a machine with a CUDA device and PyTorch:
#   1. the CUDA variants of the trainer's tests (GPU replays bitwise, async snapshots untouched by
#      later steps, the step on the device it is given);
#   2. the tolerance harness with the GPU as a host and a validator (bench/verifier_calibrate.py
#      --quick --device cuda): GPU-GPU replays, and how far CPU and GPU replays are apart;
#   3. the GPU-class preset on the GPU (bench/gpu_preset.py): step time and memory per micro-batch
#      count, plain DiLoCo against the protocol's epoch, a GPU replay of a committed segment;
#   4. with the time left, the harness at the small preset's shape (c = 12) with the GPU.
# Usage: bash bench/gpu_check.sh OUTDIR [SECONDS]   (python: $PYTHON, default python3; the project
# importable from this checkout). Each part has its own time limit; a part that fails or runs out
# of time leaves what it printed in OUTDIR and the next part still runs.
set -u
out=${1:?usage: bash bench/gpu_check.sh OUTDIR [SECONDS]}
budget=${2:-480}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_WAIT_POLICY=PASSIVE
left() { echo $((budget - SECONDS)); }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/env.txt"
lscpu | grep -i "model name" | tee -a "$out/env.txt"
$py -c 'import torch, os; print("torch", torch.__version__, "cuda", torch.version.cuda, "cpus", os.cpu_count(),
"capability", torch.backends.cpu.get_cpu_capability())' | tee -a "$out/env.txt"

echo "== 1. CUDA tests"
timeout 150 $py -m pytest -q -p no:cacheprovider -o addopts="" tests/trainer/test_step.py \
    tests/trainer/test_snapshot.py -rs 2>&1 | tail -15 | tee "$out/pytest.txt"

echo "== 2. tolerance harness, quick, with cuda ($(left) s left)"
timeout 150 $py bench/verifier_calibrate.py --quick --device cuda --json "$out/calibrate_quick.json" \
    >"$out/calibrate_quick.log" 2>&1
tail -c 1500 "$out/calibrate_quick.log"; echo

echo "== 3. GPU-class preset ($(left) s left)"
timeout $(( $(left) > 60 ? $(left) - 30 : 30 )) $py bench/gpu_preset.py --json "$out/gpu_preset.json" >"$out/gpu_preset.log" 2>&1
tail -n 14 "$out/gpu_preset.log"

rest=$(left)
if (( rest > 100 )); then
    echo "== 4. tolerance harness at small, c = 12, with cuda ($rest s left)"
    timeout $(( rest - 10 )) $py bench/verifier_calibrate.py --preset small --segment-steps 12 --inner-steps 24 \
        --warm 128 --no-other-kernels --device cuda --json "$out/calibrate_small.json" >"$out/calibrate_small.log" 2>&1
    tail -c 1200 "$out/calibrate_small.log"; echo
fi
echo "== done in $SECONDS s"
