#!/bin/sh
# One pod of the Indexed Job in lab-shards.yaml: runs shard JOB_COMPLETION_INDEX+1 of SHARDS of
# the @lab suite, then copies its reports to $REPORTS/shard-I-of-N (a volume every pod and the
# merge job mount). DRY_RUN=1 prints the commands instead of running them.
set -eu
: "${JOB_COMPLETION_INDEX:?set by Kubernetes for an Indexed Job}"
: "${SHARDS:?the Job's completions}"
REPORTS="${REPORTS:-/reports}"
i=$((JOB_COMPLETION_INDEX + 1))
if [ "$i" -lt 1 ] || [ "$i" -gt "$SHARDS" ]; then
  echo "JOB_COMPLETION_INDEX=$JOB_COMPLETION_INDEX is outside 0..$((SHARDS - 1))" >&2
  exit 2
fi
shard="$i/$SHARDS"
dir="shard-$i-of-$SHARDS"
set -- --shard "$shard"
if [ -f "$REPORTS/lab.durations.json" ]; then
  set -- "$@" --durations "$REPORTS/lab.durations.json"
fi
run() {
  if [ "${DRY_RUN:-0}" = 1 ]; then echo "$*"; else "$@"; fi
}
status=0
run cargo test -p provision-harness --test lab -- "$@" || status=$?
run mkdir -p "$REPORTS/$dir"
run cp -r "target/cucumber/$dir/." "$REPORTS/$dir/"
exit "$status"
