#!/usr/bin/env bash
# `make dev`: a local impact-scheduled Nomad on 127.0.0.1. Starts a Nomad dev
# agent with the plugins from ./bin/plugins (impact-gpu on a fake GPU
# topology, impact-exec) configured by example/agent.hcl, waits for it, then
# runs `impact agent -config example/impact.hcl` beside it. Builds nothing
# itself (make dev builds first). Ctrl-C stops both.
#
# example/agent.hcl is a production client config (NVML backend, /opt
# paths); dev.sh adds an overlay config that keeps Nomad's state in the dev
# data dir, switches impact-gpu to the fake backend on a two-island 8-GPU
# topology (DEV_TOPOLOGY, default example/topologies/two-islands-8x-a100.hcl;
# DEV_GPU_BACKEND=nvml uses real GPUs), puts the node in pool "gpu" (the
# impact_pool of the example jobs), enables raw_exec, and points impact-exec
# at the agent's gang rendezvous (/v1/gang/).
#
# The impact agent runs on a copy of example/policy.hcl whose preemption
# min_runtime is DEV_MIN_RUNTIME (default 1m, instead of 10m), so that a
# preemption can be watched without a long wait.
#
# Environment: NOMAD_PORT (default 4646; RPC and Serf use the next two),
# IMPACT_LISTEN (default 127.0.0.1:4680), DEV_DATA_DIR (default a fresh
# temporary directory), DEV_MIN_RUNTIME.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

die() { echo "dev.sh: $*" >&2; exit 1; }
command -v nomad >/dev/null || die "needs a nomad binary on PATH"
for f in bin/impact bin/plugins/impact-gpu bin/plugins/impact-exec; do
	[ -x "$f" ] || die "$f missing: run 'make build' (or 'make dev', which builds first)"
done
[ -f example/agent.hcl ] || die "example/agent.hcl (the Nomad agent's plugin config) is missing"
[ -f example/impact.hcl ] || die "example/impact.hcl (the impact agent's config) is missing"
[ -f example/policy.hcl ] || die "example/policy.hcl (the scheduling policy) is missing"

port=${NOMAD_PORT:-4646}
listen=${IMPACT_LISTEN:-127.0.0.1:4680}
data=${DEV_DATA_DIR:-$(mktemp -d -t impact-dev.XXXXXX)}
mkdir -p "$data"
export NOMAD_ADDR="http://127.0.0.1:$port"
export IMPACT_ADDR="http://$listen"

pids=()
cleanup() {
	trap - EXIT INT TERM
	echo
	echo "==> Stopping (logs kept in $data)"
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -INT "${pids[$i]}" 2>/dev/null || true
		wait "${pids[$i]}" 2>/dev/null || true
	done
}
interrupted=
trap cleanup EXIT
trap 'interrupted=1; cleanup; exit 130' INT TERM

backend=${DEV_GPU_BACKEND:-fake}
topology=${DEV_TOPOLOGY:-$root/example/topologies/two-islands-8x-a100.hcl}
[ -f "$topology" ] || die "topology $topology not found"
# A copy, so the fake backend's control file lands in the data dir.
cp "$topology" "$data/topology.hcl"
cat >"$data/dev-overlay.hcl" <<HCL
# Written by scripts/dev.sh; merged over example/agent.hcl.
data_dir   = "$data/nomad"
plugin_dir = "$root/bin/plugins"
bind_addr  = "127.0.0.1"
ports {
  http = $port
  rpc  = $((port + 1))
  serf = $((port + 2))
}
client {
  node_pool = "gpu"
}
plugin "impact-gpu" {
  config {
    backend            = "$backend"
    fake_topology      = "$data/topology.hcl"
    group_by           = "model"
    fingerprint_period = "10s"
  }
}
plugin "impact-exec" {
  config {
    rendezvous_addr = "$IMPACT_ADDR"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
HCL

min_runtime=${DEV_MIN_RUNTIME:-1m}
sed -E "s/^([[:space:]]*min_runtime[[:space:]]*=[[:space:]]*)\"[^\"]*\"/\1\"$min_runtime\"/" \
	example/policy.hcl >"$data/policy.hcl"
grep -Eq "^[[:space:]]*min_runtime[[:space:]]*=[[:space:]]*\"$min_runtime\"" "$data/policy.hcl" ||
	die "could not set min_runtime in $data/policy.hcl (a copy of example/policy.hcl)"

echo "==> Starting Nomad dev agent on $NOMAD_ADDR (log: $data/nomad.log)"
nomad agent -dev -bind 127.0.0.1 -network-interface lo \
	-config "$root/example/agent.hcl" -config "$data/dev-overlay.hcl" \
	>"$data/nomad.log" 2>&1 &
pids+=($!)

echo -n "==> Waiting for Nomad"
for _ in $(seq 1 120); do
	if nomad node status -self >/dev/null 2>&1 || nomad node status 2>/dev/null | grep -q ready; then
		break
	fi
	kill -0 "${pids[0]}" 2>/dev/null || { echo; tail -30 "$data/nomad.log"; die "nomad exited"; }
	echo -n .
	sleep 1
done
echo
nomad node status 2>/dev/null | grep -q ready || { tail -30 "$data/nomad.log"; die "no ready Nomad client after 120s"; }

echo "==> Starting impact agent on $IMPACT_ADDR (log: $data/impact.log; policy $data/policy.hcl, min_runtime $min_runtime)"
bin/impact agent -config example/impact.hcl -policy "$data/policy.hcl" -http-listen "$listen" -nomad-address "$NOMAD_ADDR" -default-pool gpu \
	>"$data/impact.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 30); do
	bin/impact queue >/dev/null 2>&1 && break
	kill -0 "${pids[1]}" 2>/dev/null || { tail -30 "$data/impact.log"; die "impact agent exited"; }
	sleep 1
done
bin/impact queue >/dev/null 2>&1 || { tail -30 "$data/impact.log"; die "impact agent not answering on $IMPACT_ADDR after 30s"; }

# The fake backend's control file (relative paths are next to the topology
# copy): writing "stats <index> utilization=<pct>" there shows up in the
# impact agent's impact_gpu_utilization_percent within a stats interval.
ctl=$(sed -n 's/^[[:space:]]*control_file[[:space:]]*=[[:space:]]*"\(.*\)".*/\1/p' "$data/topology.hcl")
case "$ctl" in
"") ctl_hint="(the topology names no control_file)" ;;
/*) ctl_hint="echo 'stats 1 utilization=77' >> $ctl" ;;
*) ctl_hint="echo 'stats 1 utilization=77' >> $data/$ctl" ;;
esac
[ "$backend" = fake ] || ctl_hint="(real GPUs: DEV_GPU_BACKEND=$backend)"

cat <<MSG

  Nomad UI:        $NOMAD_ADDR/ui
  Impact API:      $IMPACT_ADDR/v1/queue   (metrics: $IMPACT_ADDR/metrics)
  Fake GPU stats:  $ctl_hint

  In another shell:
    export NOMAD_ADDR=$NOMAD_ADDR IMPACT_ADDR=$IMPACT_ADDR
    nomad job run example/jobs/distributed-training.nomad.hcl
    bin/impact queue
    bin/impact explain llm-pretrain
    nomad var get nomad/jobs/llm-pretrain/impact
    nomad job run example/jobs/sweep.nomad.hcl    # scavenger, fills the node
    nomad job run example/jobs/urgent.nomad.hcl   # critical: preempts the sweep after $min_runtime

  Logs: $data/nomad.log, $data/impact.log. Ctrl-C stops both.

MSG
wait -n "${pids[@]}" || true
# On Ctrl-C the agents get the SIGINT too and may exit before this shell
# runs its trap: give the trap a moment, so that only a real crash is
# reported as one.
sleep 1
[ -n "$interrupted" ] || echo "dev.sh: a process exited; see the logs in $data" >&2
