#!/usr/bin/env bash
# The manager pod's job, as the design has it: PreTraining (plan, create the workers and, once they are
# Ready, the hostfile and the chief), then PostTraining (stream the chief's log, wait for it to end, delete
# the workers). Both phases get the same request: this script's arguments plus the DT_* environment
# (`distributetrain run --help` lists them all); PostTraining reads only the job's name, namespace and
# keep-chief from it. The logic lives in the distributetrain package.
#
# The kubelet's SIGTERM reaches PID 1, this shell. It is handed to the running phase, which deletes everything
# the job created and exits 128+signal. A phase tells this shell (SIGUSR1) once it holds signals for its
# cleanup; a signal that arrives earlier, or between the phases, waits until then, so none is lost.
# The active deadline counts from this script's start.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${DT_PYTHON:-python3}
export DT_MANAGER_STARTED_AT="${DT_MANAGER_STARTED_AT:-$(date +%s)}"
export DT_NOTIFY_PARENT=1
# the pod's first line, to the millisecond in the phases' own format: where the manager's own start-up begins
# (bench/measure/demo_phases.py times it up to the first create)
echo "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ) distributetrain: manager started" >&2

# The job's Prometheus metrics, served for this script's whole life on the `metrics` port (DT_METRICS_PORT,
# 9102; 0: none) so a scrape works in either phase and between them: the phases write the job's state to
# DT_MANAGER_STATE and the server reads it at each scrape (docs/observability.md). A server that cannot start
# says so in this log; the job goes on without it.
state_dir="" metrics=""
if [ -z "${DT_MANAGER_STATE:-}" ] && state_dir=$(mktemp -d 2>/dev/null); then
    export DT_MANAGER_STATE="$state_dir/state.json"
fi
if [ "${DT_METRICS_PORT:-9102}" != "0" ] && [ -n "${DT_MANAGER_STATE:-}" ]; then
    "$python" -m distributetrain.observe.metrics --state "$DT_MANAGER_STATE" --port "${DT_METRICS_PORT:-9102}" &
    metrics=$!
fi
stop_metrics() {
    if [ -n "$metrics" ]; then kill "$metrics" 2>/dev/null; wait "$metrics" 2>/dev/null; fi
    if [ -n "$state_dir" ]; then rm -rf "$state_dir"; fi
}
trap stop_metrics EXIT

child="" ready="" pending="" received=""
deliver() {
    if [ -n "$pending" ] && [ -n "$child" ] && [ -n "$ready" ]; then
        kill "-$pending" "$child" 2>/dev/null
        pending=""
    fi
}
trap 'received=TERM pending=TERM; deliver' TERM
trap 'received=INT pending=INT; deliver' INT
trap 'ready=1; deliver' USR1

phase() {
    local script=$1 status
    shift
    ready=""
    "$python" "$here/$script" "$@" &
    child=$!
    # `wait` returns early whenever a trapped signal arrives: wait again until the phase itself has ended
    while true; do
        wait "$child"
        status=$?
        kill -0 "$child" 2>/dev/null || break
    done
    child=""
    return "$status"
}

phase DistributeTrain_PreTraining.py "$@" || exit $?
# PreTraining succeeded: a signal it did not act on (it came as PreTraining finished) goes to PostTraining,
# which then deletes the job at once
pending=$received
phase DistributeTrain_PostTraining.py "$@"
