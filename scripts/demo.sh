#!/usr/bin/env bash
# `make demo`: the main job, for real, on the repository's local cluster (localcluster/).
# Nodes of 5, 3 and 2 GPUs running our images as scripts/local-cluster-images.yaml maps them; the namespace's
# Pod Security labels (scripts/demo-namespace.yaml); `kubectl apply`
# of rbac/ and the manager manifest (6 GPUs); the manager's log
# followed to the end (inventory, plan, pods, training epoch by epoch, final accuracy); then the pods left
# (workers gone, chief kept); the cluster stopped. Exits with the manager's exit code.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
DIR=${DEMO_DIR:-$(mktemp -d /tmp/distributetrain-demo.XXXXXX)}
KUBECTL=(kubectl --kubeconfig "$DIR/kubeconfig" --cache-dir "$DIR/kubectl-cache")
started=$EPOCHREALTIME
elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

cleanup() { localcluster down --dir "$DIR" >/dev/null 2>&1 || true; }
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m (t=%ss)\n' "$*" "$(elapsed)"; }

step "starting a local cluster: nodes of 5, 3 and 2 GPUs"
localcluster up --nodes 5,3,2 --runtime process --dir "$DIR" --images scripts/local-cluster-images.yaml
"${KUBECTL[@]}" get nodes -o wide

step "kubectl apply --server-side -f scripts/demo-namespace.yaml   (the namespace's Pod Security levels)"
"${KUBECTL[@]}" apply --server-side -f scripts/demo-namespace.yaml
"${KUBECTL[@]}" get namespace default -L pod-security.kubernetes.io/enforce -L pod-security.kubernetes.io/warn

step "kubectl apply -f rbac/"
"${KUBECTL[@]}" apply -f rbac/

step "kubectl apply -f manifests/   (the job pods' template; the manager Job: 6 GPUs)"
"${KUBECTL[@]}" apply -f manifests/
MANAGER=(-l batch.kubernetes.io/job-name=distributetrain-manager)
"${KUBECTL[@]}" wait --for=create pod "${MANAGER[@]}" --timeout=60s >/dev/null
"${KUBECTL[@]}" wait --for=jsonpath='{.status.phase}'=Running pod "${MANAGER[@]}" --timeout=120s \
  || "${KUBECTL[@]}" wait --for=jsonpath='{.status.phase}'=Succeeded pod "${MANAGER[@]}" --timeout=5s

step "kubectl logs -f job/distributetrain-manager"
"${KUBECTL[@]}" logs -f job/distributetrain-manager

"${KUBECTL[@]}" wait --for=condition=Complete job/distributetrain-manager --timeout=30s >/dev/null 2>&1 || true
status=$("${KUBECTL[@]}" get job distributetrain-manager \
  -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}')
code=$("${KUBECTL[@]}" get pod "${MANAGER[@]}" \
  -o jsonpath='{.items[-1:].status.containerStatuses[0].state.terminated.exitCode}')
step "the manager Job ended: ${status:-?}(exit code ${code:-?}); the pods left (workers gone, chief kept):"
"${KUBECTL[@]}" get jobs,pods -o wide

step "stopping the local cluster"
cleanup
trap - EXIT
echo "demo wall time: $(elapsed) s"
exit "${code:-1}"
