#!/bin/sh
# A stand-in for a real trainer, run by `antdt run` as a job's worker command
# (command_job_test): it records the environment it was given in its working
# directory (env.<worker>.<incarnation>), then
# - ANTDT_MODE=plain: rank 0 appends three steps to its loss log; it exits;
# - otherwise: execs the demo trainer given as $1 with flags built from the
#   ANTDT_* variables, the rest of its arguments after them.
set -eu
env | grep -E '^(ANTDT_|MASTER_ADDR=|MASTER_PORT=|RANK=|WORLD_SIZE=|LOCAL_RANK=|PYTHONPATH=)' |
  sort > "env.$ANTDT_WORKER_ID.$ANTDT_INCARNATION"
if [ "$ANTDT_MODE" = plain ]; then
  if [ "$RANK" = 0 ]; then
    now=$(date +%s)
    for line in '"step": 1, "loss": 1.5' '"step": 2, "loss": 1.0' '"step": 3, "loss": 0.5'; do
      echo "{\"time_unix\": $now, $line, \"samples\": 8}" >> "$ANTDT_LOSS_LOG"
    done
  fi
  exit 0
fi
trainer=$1
shift
exec "$trainer" --sharding "$ANTDT_SHARDING_ADDR" --job "$ANTDT_JOB" \
  --dataset "$ANTDT_DATASET" --worker-id "$ANTDT_WORKER_ID" \
  --incarnation "$ANTDT_INCARNATION" --journal "$ANTDT_JOURNAL" --ps "$ANTDT_PS_ADDRS" \
  --features "$ANTDT_FEATURES" --agent "$ANTDT_AGENT_ADDR" \
  --local-batch "$ANTDT_LOCAL_BATCH" --speed-file "$ANTDT_NODE_SPEED_FILE" \
  --report-interval 250ms "$@"
