#!/usr/bin/env bash
# Stop the daemons tests/slurm/start-cluster.sh started, by their recorded pids (never by name).
set -uo pipefail
STATE=/run/benchmark-illusion-slurm
for name in slurmd slurmctld munged; do
  pidfile="$STATE/$name.pid"
  [[ -s "$pidfile" ]] || continue
  pid=$(tr "\n" " " < "$pidfile")
  kill $pid 2>/dev/null && echo "stop-cluster: stopped $name ("$pid")" >&2
  rm -f "$pidfile"
done
