#!/usr/bin/env bash
# bench-ab.sh: compare the engine's cycle benchmarks across revisions in
# one run. Each revision's scheduler/engine test binary is built from its
# own tree (git archive, so the work tree is not touched), then the
# binaries are run in turn, round after round, so that every revision
# sees the same machine: on a shared 2-core VM one binary's median moves
# by 2x within the hour, and only ratios taken in the same round mean
# anything.
#
# Usage: scripts/bench-ab.sh [-r ROUNDS] [-t BENCHTIME] [-b BENCH] [-w] REV [REV...]
#   -r  rounds (default 8)
#   -t  -test.benchtime of each run (default 20x)
#   -b  benchmark name, anchored (default BenchmarkDecide)
#   -w  build every revision with the work tree's
#       scheduler/engine/bench_test.go, so that all run the same benchmark
#       code and report the same metrics (an older revision's benchmarks
#       may report ns/op only, a mean, where the work tree's report the
#       median too); the revision must still build with it
#   REV any git revision; "." is the work tree as it is (uncommitted
#       changes included)
#
# Prints, per round, each revision's figure (median-ms where the benchmark
# reports it, else ms/op; and cpu-ms/op where reported), then the median
# over rounds and the median of the per-round ratios first-revision/REV.
# Ratios between a median and a mean mean little: use -w then.
set -euo pipefail

rounds=8 benchtime=20x bench=BenchmarkDecide overlay=
while getopts "r:t:b:w" o; do
	case $o in
	r) rounds=$OPTARG ;;
	t) benchtime=$OPTARG ;;
	b) bench=$OPTARG ;;
	w) overlay=scheduler/engine/bench_test.go ;;
	*) sed -n '2,25p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -lt 1 ]; then
	sed -n '2,25p' "$0" >&2
	exit 2
fi
if ! [[ $bench =~ ^Benchmark[A-Za-z0-9_]*$ ]]; then
	echo "bench-ab: -b takes one benchmark's name, anchored already (e.g. BenchmarkDecide), not a pattern: $bench" >&2
	exit 2
fi

root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

names=()
for rev in "$@"; do
	name=$(printf '%s' "$rev" | tr -c 'A-Za-z0-9._' '_')
	[ "$rev" = "." ] && name=worktree
	names+=("$name")
	if [ "$rev" = "." ]; then
		src=$root
	else
		git -C "$root" rev-parse --verify --quiet "$rev^{commit}" >/dev/null ||
			{ echo "bench-ab: no such revision: $rev" >&2; exit 2; }
		src=$tmp/src-$name
		mkdir -p "$src"
		git -C "$root" archive "$rev" | tar -x -C "$src"
		if [ -n "$overlay" ]; then
			[ -d "$src/$(dirname "$overlay")" ] ||
				{ echo "bench-ab: -w: $rev has no $(dirname "$overlay")" >&2; exit 2; }
			cp "$root/$overlay" "$src/$overlay"
		fi
	fi
	echo "building $rev ..." >&2
	(cd "$src" && go test -c -o "$tmp/$name.test" ./scheduler/engine) ||
		{ echo "bench-ab: $rev does not build${overlay:+ with -w (the work tree copy of $overlay)}" >&2; exit 1; }
done

declare -A fig
printf '%-6s' round
for n in "${names[@]}"; do printf ' %22s' "$n"; done
echo
for r in $(seq "$rounds"); do
	printf '%-6s' "$r"
	for n in "${names[@]}"; do
		out=$("$tmp/$n.test" -test.run '^$' -test.bench "^${bench}\$" -test.benchtime "$benchtime" 2>&1 | grep -E "^${bench}(-[0-9]+)?[[:space:]]" || true)
		[ -n "$out" ] || { echo; echo "bench-ab: $n printed no $bench line (no such benchmark in scheduler/engine, or it failed)" >&2; exit 1; }
		m=$(echo "$out" | grep -oE '[0-9.]+ median-ms' | cut -d' ' -f1 || true)
		[ -n "$m" ] || m=$(echo "$out" | awk '{printf "%.2f", $3/1e6}')
		c=$(echo "$out" | grep -oE '[0-9.]+ cpu-ms/op' | cut -d' ' -f1 || true)
		fig[$r,$n]=$m
		printf ' %22s' "$m${c:+ (cpu $c)}"
	done
	echo
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) printf "%.2f", a[(NR+1)/2]; else printf "%.2f", (a[NR/2]+a[NR/2+1])/2}'; }
first=${names[0]}
printf '%-6s' median
for n in "${names[@]}"; do
	printf ' %22s' "$(for r in $(seq "$rounds"); do echo "${fig[$r,$n]}"; done | median)"
done
echo
printf '%-6s' ratio
for n in "${names[@]}"; do
	printf ' %22s' "$(for r in $(seq "$rounds"); do awk -v a="${fig[$r,$first]}" -v b="${fig[$r,$n]}" 'BEGIN {printf "%.4f\n", a/b}'; done | median)x"
done
echo
