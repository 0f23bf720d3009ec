#!/usr/bin/env bash
# `make dev`: a local impact-scheduled Nomad on 127.0.0.1. Starts a Nomad dev
# agent and DEV_CLIENTS-1 further clients with the plugins from
# ./bin/plugins (impact-gpu on a fake GPU topology, impact-exec) configured
# by example/agent.hcl, waits for every node, then runs `impact agent
# -config example/impact.hcl` beside them. Builds nothing itself (make dev
# builds first). Ctrl-C stops them all, and their tasks.
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
# DEV_CLIENTS (default 2) is the number of GPU nodes: the dev agent is the
# first; each further one is a client process of its own (its own name,
# data and alloc dirs, ports, cgroup parent, and a copy of the topology
# whose GPU UUIDs are its own), joined to the dev agent's server. Two
# nodes let example/jobs/distributed-training.nomad.hcl (one member per
# node) run as written; DEV_CLIENTS=1 is a single node.
#
# Environment: NOMAD_PORT (default 4646; RPC and Serf use the next two,
# client i of DEV_CLIENTS the three from NOMAD_PORT+3i), IMPACT_LISTEN
# (default 127.0.0.1:4680), DEV_DATA_DIR (default a fresh temporary
# directory), DEV_MIN_RUNTIME, DEV_CLIENTS, DEV_CHECKPOINTS.
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
clients=${DEV_CLIENTS:-2}
[[ "$clients" =~ ^[1-9][0-9]*$ ]] || die "DEV_CLIENTS=$clients: must be a whole number from 1"

listen=${IMPACT_LISTEN:-127.0.0.1:4680}
data=${DEV_DATA_DIR:-$(mktemp -d -t impact-dev.XXXXXX)}
mkdir -p "$data"
data=$(cd "$data" && pwd) # absolute: the cleanup finds this run's tasks by it
[ "$data" != / ] || die "DEV_DATA_DIR must not be /"
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
	# A Nomad client leaves its tasks running when it stops (they are
	# re-attached on restart): end the task executors and the tasks of
	# this run, found by a working directory under the data dir or a
	# command line naming the nodes' data or alloc dirs (not the logs, so
	# a tail -f of them survives), so that Ctrl-C leaves nothing behind.
	# Rescanned until none is left, since a task's launcher may start a
	# process after a scan; each gets SIGTERM once, SIGKILL after 2s (an
	# impact-exec supervisor outlives its plugin by design), at most 8s;
	# zombies are left to their parents.
	local p pid state found since=$SECONDS
	local -A termed=()
	while ((SECONDS - since < 8)); do
		found=0
		for p in /proc/[0-9]*; do
			pid=${p#/proc/}
			state=$(sed -n 's/.*) \(.\).*/\1/p' "$p/stat" 2>/dev/null || true) # set -e: the process may be gone
			case "$state" in Z | X | "") continue ;; esac
			case "$(readlink "$p/cwd" 2>/dev/null)/ $(tr '\0' ' ' 2>/dev/null <"$p/cmdline")" in
			"$data"/* | *"$data/nomad/"* | *"$data"/client-*/alloc/* | *"$data"/client-*/nomad/*)
				found=1
				if [ -z "${termed[$pid]:-}" ]; then
					termed[$pid]=1
					kill -TERM "$pid" 2>/dev/null || true
				elif ((SECONDS - since >= 2)); then
					kill -KILL "$pid" 2>/dev/null || true
				fi
				;;
			esac
		done
		[ "$found" = 0 ] && break
		sleep 0.1
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
# What every dev node declares, as a GPU node of a training cluster
# would: the capacity the example jobs ask for (the fake GPUs come with no
# CPU or memory; nothing here enforces these sizes), and the host volume
# "checkpoints" the distributed-training example saves to: the same
# directory on every node (shared storage, on one machine), at the path
# the example's tasks write to (DEV_CHECKPOINTS, default /mnt/checkpoints;
# it outlives the run, so a job submitted again resumes from it).
checkpoints=${DEV_CHECKPOINTS:-/mnt/checkpoints}
mkdir -p "$checkpoints" || die "cannot create the checkpoints directory $checkpoints (DEV_CHECKPOINTS)"
client_common=$(cat <<HCL
  cpu_total_compute = 64000
  memory_total_mb   = 262144
  host_volume "checkpoints" {
    path      = "$checkpoints"
    read_only = false
  }
HCL
)
# plugins_hcl TOPOLOGY: the plugin blocks of a dev node whose fake GPUs
# are TOPOLOGY's.
plugins_hcl() {
	cat <<HCL
plugin "impact-gpu" {
  config {
    backend            = "$backend"
    fake_topology      = "$1"
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
}
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
$client_common
}
$(plugins_hcl "$data/topology.hcl")
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

# Further GPU nodes: client processes joined to the dev agent's server.
for ((i = 1; i < clients; i++)); do
	dir="$data/client-$i"
	mkdir -p "$dir"
	# The same topology with GPU UUIDs of its own (the last two hex digits
	# of each replaced by the client's number): Nomad and the scheduler
	# tell GPUs apart by UUID across nodes.
	sed -E "s/^([[:space:]]*uuid[[:space:]]*=[[:space:]]*\"GPU-[0-9a-fA-F-]*)[0-9a-fA-F]{2}\"/\1$(printf '%02x' "$i")\"/" \
		"$topology" >"$dir/topology.hcl"
	cp=$((port + 3 * i))
	cat >"$dir/client.hcl" <<HCL
# Written by scripts/dev.sh; merged over example/agent.hcl.
name       = "dev-client-$i"
data_dir   = "$dir/nomad"
plugin_dir = "$root/bin/plugins"
bind_addr  = "127.0.0.1"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = $cp
  rpc  = $((cp + 1))
  serf = $((cp + 2))
}
server {
  enabled = false
}
client {
  enabled           = true
  servers           = ["127.0.0.1:$((port + 1))"]
  node_pool         = "gpu"
  alloc_dir         = "$dir/alloc"
  cgroup_parent     = "impact-dev-client-$i"
  network_interface = "lo"
$client_common
}
$(plugins_hcl "$dir/topology.hcl")
HCL
	echo "==> Starting Nomad client dev-client-$i on 127.0.0.1:$cp (log: $dir/nomad.log)"
	nomad agent -config "$root/example/agent.hcl" -config "$dir/client.hcl" >"$dir/nomad.log" 2>&1 &
	pids+=($!)
done

echo -n "==> Waiting for $clients ready Nomad node(s)"
ready=0
for _ in $(seq 1 120); do
	ready=$(nomad node status 2>/dev/null | grep -c ' ready' || true)
	[ "$ready" -ge "$clients" ] && break
	for pid in "${pids[@]}"; do
		kill -0 "$pid" 2>/dev/null || { echo; tail -30 "$data/nomad.log"; die "a nomad process exited (logs in $data)"; }
	done
	echo -n .
	sleep 1
done
echo
[ "$ready" -ge "$clients" ] || { tail -30 "$data/nomad.log"; die "$ready of $clients Nomad nodes ready after 120s"; }

echo "==> Starting impact agent on $IMPACT_ADDR (log: $data/impact.log; policy $data/policy.hcl, min_runtime $min_runtime)"
bin/impact agent -config example/impact.hcl -policy "$data/policy.hcl" -http-listen "$listen" -nomad-address "$NOMAD_ADDR" -default-pool gpu \
	>"$data/impact.log" 2>&1 &
pids+=($!)
impact_pid=$!

for _ in $(seq 1 30); do
	bin/impact queue >/dev/null 2>&1 && break
	kill -0 "$impact_pid" 2>/dev/null || { tail -30 "$data/impact.log"; die "impact agent exited"; }
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
    nomad job run example/jobs/sweep.nomad.hcl    # scavenger, fills the GPUs left
    # once the sweep runs (example/README.md):
    nomad job run example/jobs/urgent.nomad.hcl   # critical: preempts the sweep after $min_runtime

  Logs: $data/nomad.log, $data/impact.log (clients: $data/client-*/nomad.log). Ctrl-C stops them all.

MSG
wait -n "${pids[@]}" || true
# On Ctrl-C the agents get the SIGINT too and may exit before this shell
# runs its trap: give the trap a moment, so that only a real crash is
# reported as one.
sleep 1
[ -n "$interrupted" ] || echo "dev.sh: a process exited; see the logs in $data" >&2
