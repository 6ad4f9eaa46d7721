#!/bin/sh
# dist_kill.sh: a rank lost mid-training stops the job (issue 14).
#   dist_kill.sh IABN WORKDIR STOP|KILL
# Two ranks train under mpirun; 4 s in, rank 1 gets SIGSTOP (a hung rank:
# the other one's collective times out, its pings go unanswered, and it must
# exit non-zero naming rank 1) or SIGKILL (a vanished rank: the launcher's
# own detection, which must name it too).  Either way the job must end
# non-zero, within 60 s, with a message naming rank 1.
set -u
IABN=$1 WORK=$2 SIG=$3
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
cat > "$WORK/cfg.json" <<'JSON'
{
  "network": {"arch": "resnext_tiny", "activation": "leaky_relu", "activation_param": 0.01,
              "input_3x3": true, "bn_mode": "inplace_abn_sync"},
  "optimizer": {"batch_size": 8, "learning_rate": 0.01,
                "schedule": {"type": "step", "epochs": 1000, "params": {"step_size": 30}}},
  "input": {"crop_train": 32, "crop_val": 32, "scale_val": 32}
}
JSON
"$IABN" data synth --out "$WORK/data" --classes 4 --train-images 8 --val-images 2 --size 32 >/dev/null || exit 1
start=$(date +%s)
OMP_NUM_THREADS=1 IABN_COMM_TIMEOUT=3 timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 \
    sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 4; kill -'"$SIG"' $$) & fi
           exec "$0" train "$1/cfg.json" "$1/data" --output-dir "$1/out" -q -j 1' \
    "$IABN" "$WORK" > "$WORK/log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$WORK/log"
echo "exit status $rc after $took s"
if [ "$rc" -eq 0 ]; then echo "FAIL: the job exited 0 after rank 1 was lost"; exit 1; fi
if [ "$rc" -eq 124 ]; then echo "FAIL: the job hung (killed by the 90 s guard)"; exit 1; fi
if [ "$took" -gt 60 ]; then echo "FAIL: $took s to notice the lost rank (limit 60)"; exit 1; fi
if ! grep -q "rank 1" "$WORK/log"; then echo "FAIL: no message names rank 1"; exit 1; fi
echo "ok: rank 1 lost ($SIG), named, job ended in $took s"
