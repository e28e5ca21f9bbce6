#!/usr/bin/env bash
# Every check that needs a GPU, in one run on a machine with a CUDA device and PyTorch:
#   1. the CUDA variants of the trainer's tests (GPU replays bitwise, async snapshots untouched by
#      later steps, the step on the device it is given);
#   2. the tolerance harness with the GPU as a host and a validator (bench/verifier_calibrate.py
#      --quick --device cuda): GPU-GPU replays, and how far CPU and GPU replays are apart;
#   3. the GPU-class preset on the GPU (bench/gpu_preset.py): step time and memory per micro-batch
#      count, plain DiLoCo against the protocol's epoch, a GPU replay of a committed segment;
#   4. with the time left, the harness at the small preset's shape (c = 12) with the GPU.
# With PARTS naming them (e.g. PARTS="5 6 7"; they need far more than the default budget), the
# checks of islands and whole epochs (issue 31):
#   5. NCCL islands, when the machine has 2 GPUs or more: the NCCL test (a 2-GPU FSDP2 island against
#      its one-GPU replay) and bench/island.py at gpt124m on 1, 2, 4 … GPUs (step time, GPU memory per
#      rank, leaf write, and whether a one-GPU replay with M = N gives the island's leaf);
#   6. a whole gpt124m epoch (160 segments) through the protocol side by side with plain steps, and a
#      GPU replay of its segment 0 (bench/gpu_preset.py --segments 160: about 40 minutes on one H100);
#   7. the CUDA daemons on the embedded chain for two epochs: `veriloco simulate --device cuda`
#      (hosts train and validators replay on the GPU; small preset).
# Usage: [PARTS="1 2 3 4"] bash bench/gpu_check.sh OUTDIR [SECONDS]   (python: $PYTHON, default
# python3; the project importable from this checkout). Each part has its own time limit; a part that
# fails or runs out of time leaves what it printed in OUTDIR and the next part still runs.
set -u
out=${1:?usage: bash bench/gpu_check.sh OUTDIR [SECONDS]}
budget=${2:-480}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_WAIT_POLICY=PASSIVE
left() { echo $((budget - SECONDS)); }
parts=" ${PARTS:-1 2 3 4} "
want() { [[ "$parts" == *" $1 "* ]]; }
gpus=$(nvidia-smi -L | wc -l)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/env.txt"
lscpu | grep -i "model name" | tee -a "$out/env.txt"
$py -c 'import torch, os; print("torch", torch.__version__, "cuda", torch.version.cuda, "cpus", os.cpu_count(),
"capability", torch.backends.cpu.get_cpu_capability())' | tee -a "$out/env.txt"

if want 1; then
echo "== 1. CUDA tests"
timeout 150 $py -m pytest -q -p no:cacheprovider -o addopts="" tests/trainer/test_step.py \
    tests/trainer/test_snapshot.py -rs 2>&1 | tail -15 | tee "$out/pytest.txt"
fi

if want 2; then
echo "== 2. tolerance harness, quick, with cuda ($(left) s left)"
timeout 150 $py bench/verifier_calibrate.py --quick --device cuda --json "$out/calibrate_quick.json" \
    >"$out/calibrate_quick.log" 2>&1
tail -c 1500 "$out/calibrate_quick.log"; echo
fi

if want 3; then
echo "== 3. GPU-class preset ($(left) s left)"
timeout $(( $(left) > 60 ? $(left) - 30 : 30 )) $py bench/gpu_preset.py --json "$out/gpu_preset.json" >"$out/gpu_preset.log" 2>&1
tail -n 14 "$out/gpu_preset.log"
fi

rest=$(left)
if want 4 && (( rest > 100 )); then
    echo "== 4. tolerance harness at small, c = 12, with cuda ($rest s left)"
    timeout $(( rest - 10 )) $py bench/verifier_calibrate.py --preset small --segment-steps 12 --inner-steps 24 \
        --warm 128 --no-other-kernels --device cuda --json "$out/calibrate_small.json" >"$out/calibrate_small.log" 2>&1
    tail -c 1200 "$out/calibrate_small.log"; echo
fi

if want 5; then
    if (( gpus >= 2 )); then
        ranks=1; n=2; while (( n <= gpus )); do ranks="$ranks,$n"; n=$((n * 2)); done
        echo "== 5. NCCL islands on $gpus GPUs: ranks $ranks ($(left) s left)"
        timeout 300 $py -m pytest -q -p no:cacheprovider -o addopts="" tests/trainer/test_island.py -k nccl -rs \
            2>&1 | tail -5 | tee "$out/pytest_nccl.txt"
        timeout $(( $(left) > 60 ? $(left) - 30 : 30 )) $py bench/island.py --preset gpt124m --ranks "$ranks" \
            --steps 3 --device cuda --json "$out/island_cuda.json" >"$out/island_cuda.log" 2>&1
        tail -n 8 "$out/island_cuda.log"
    else
        echo "== 5. skipped: NCCL islands need 2 GPUs or more, this machine has $gpus"
    fi
fi

if want 6; then
    echo "== 6. a whole gpt124m epoch, protocol beside plain steps, and a GPU replay ($(left) s left)"
    timeout $(( $(left) > 60 ? $(left) - 30 : 30 )) $py bench/gpu_preset.py --micro-batches 1 --segments 160 \
        --repeats 1 --budget-s 100000 --json "$out/gpu_epoch.json" >"$out/gpu_epoch.log" 2>&1
    tail -n 8 "$out/gpu_epoch.log"
fi

if want 7; then
    echo "== 7. CUDA daemons on the embedded chain, two epochs ($(left) s left)"
    timeout $(( $(left) > 60 ? $(left) - 30 : 30 )) $py -m veriloco.cli simulate --device cuda --preset small \
        --epochs 2 >"$out/simulate_cuda.log" 2>&1
    echo "exit $?"; tail -n 25 "$out/simulate_cuda.log"
fi
echo "== done in $SECONDS s"
