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
# And (PARTS="1 8 9 10", about 6 minutes on one H100/H200 with 16 CPU cores):
#   8. the CUDA compute-profile class (issue 28): bench/mixed_profiles.py --device cuda at tiny, demo
#      and small after 2,048 steps (warmed on the GPU): a CUDA host replayed by a CUDA validator, the
#      CPU's own class beside it, and every class's fingerprint (the CUDA one must differ from each CPU one);
#   9. Muon on the GPU (issue 32): the spectral check's cost (bench/spectral_cost.py) on this machine's
#      CPU at 16 threads and on the GPU, beside a Muon step of gpt124m's own shape on the GPU. Run
#      alone: the background jobs below are waited for first;
#  10. the thread-count check on this machine's CPU (bench/thread_invariance.py) per MKL mode, the
#      trainer's own (AUTO,STRICT) included: in the background on CPUs 8-15 beside parts 1 and 8 (it
#      checks bits, whose equality no neighbour changes; its CPU-time row is then a loaded figure).
# BESIDE="command" runs one more command in the background from the start (a GPU check that asserts
# no timing), its output in OUTDIR/beside.log; part 9 waits for it.
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
cpus=$(nproc)
waitfor() {  # waitfor PID NAME SECONDS: wait for a background job, stopping it after SECONDS
    local t=0
    while kill -0 "$1" 2>/dev/null && (( t < $3 )); do sleep 2; t=$((t + 2)); done
    if kill -0 "$1" 2>/dev/null; then
        echo "== $2 still running after $3 s more: stopped"; kill -- -"$1" 2>/dev/null || kill "$1"
    fi
    wait "$1"; echo "== $2 exit $? (at $SECONDS s)"
}
background() {  # in a session of its own where setsid exists, so waitfor can stop the whole job
    if command -v setsid >/dev/null; then setsid "$@" & else "$@" & fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/env.txt"
lscpu | grep -i "model name" | tee -a "$out/env.txt"
$py -c 'import torch, os; print("torch", torch.__version__, "cuda", torch.version.cuda, "cpus", os.cpu_count(),
"capability", torch.backends.cpu.get_cpu_capability())' | tee -a "$out/env.txt"

bg10=""; bgx=""
if want 10; then
    echo "== 10. thread invariance on this CPU, in the background"
    pin=""; (( cpus >= 16 )) && command -v taskset >/dev/null && pin="taskset -c 8-15"
    background timeout 300 $pin $py bench/thread_invariance.py --cbwr "" AUTO,STRICT COMPATIBLE --time-steps 20 \
        --json "$out/thread_invariance.json" >"$out/thread_invariance.log" 2>&1
    bg10=$!
fi
if [[ -n "${BESIDE:-}" ]]; then
    echo "== beside: $BESIDE"
    background bash -c "$BESIDE" >"$out/beside.log" 2>&1
    bgx=$!
fi

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

if want 8; then
    native="native ($($py -c 'import torch; print(torch.backends.cpu.get_cpu_capability().lower())'))"
    echo "== 8. the CUDA class beside the CPU's, 2,048 steps ($(left) s left)"
    timeout 240 $py bench/mixed_profiles.py --device cuda --presets tiny demo small --warm 2048 \
        --classes cuda "$native" --json "$out/mixed_cuda.json" 2>&1 | tee "$out/mixed_cuda.log" | cut -c 1-600
fi

[[ -n "$bg10" ]] && waitfor "$bg10" "10. thread invariance" 120 && tail -n 5 "$out/thread_invariance.log"
[[ -n "$bgx" ]] && waitfor "$bgx" "beside" $(( $(left) > 150 ? $(left) - 150 : 10 )) && tail -n 5 "$out/beside.log"

if want 9; then
    echo "== 9. the Muon spectral check on this CPU and the GPU, beside a GPU Muon step ($(left) s left)"
    timeout 150 $py bench/spectral_cost.py --threads "$cpus" --repeats 2 --no-svd --device cuda --batch 32 \
        --seq-len 1024 --step-optimizer muon --steps 3 >"$out/spectral_cost.log" 2>&1
    echo "exit $?"; tail -n 1 "$out/spectral_cost.log" | cut -c 1-1500
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
