#!/usr/bin/env bash
# Enforces the layering README.md describes ("Architecture") with `go list`:
#   - the pure scheduling core never imports the Nomad adapter, net/http or nomad/api;
#   - the simulator (scheduler/sim/...) links neither the adapter nor nomad/api;
#   - only scheduler/nomad (and its fake) imports github.com/hashicorp/nomad/api;
#   - only device/gpu/nvml imports github.com/NVIDIA/go-nvml;
#   - the gang protocol (gang/) and the jobspec contract (jobspec/), each
#     shared by impact and impact-exec, depend on neither the driver nor
#     the scheduler;
#   - test doubles (fakes under an internal/ directory, packages named
#     *test or test*) are imported only by tests and by other test doubles,
#     so no binary links them;
#   - entry points (main packages) live under cmd/: the driver, device and
#     scheduler packages are libraries;
#   - nothing depends on the github.com/hashicorp/nomad module itself (licence);
#   - the engine's steps own their state: a step's fields are read and
#     written only in its own files (scheduler/engine/doc.go).
set -euo pipefail
mod=github.com/impact-sched/nomad-impact
fail=0

pure=(scheduler/cluster scheduler/policy scheduler/placement scheduler/preempt scheduler/engine)
for p in "${pure[@]}"; do
	[ -d "$p" ] || continue
	deps=$(go list -deps "./$p/..." 2>/dev/null)
	for bad in net/http github.com/hashicorp/nomad/api "$mod/scheduler/nomad"; do
		if grep -qx "$bad" <<<"$deps"; then
			echo "import rule: $p must not depend on $bad"; fail=1
		fi
	done
done

# The simulator runs the core on traces: it links neither the Nomad
# adapter nor Nomad's API (the agent config it reads the cycle block of
# does not import the adapter either).
deps=$(go list -deps ./scheduler/sim/... 2>/dev/null)
for bad in github.com/hashicorp/nomad/api "$mod/scheduler/nomad"; do
	if grep -qx "$bad" <<<"$deps"; then
		echo "import rule: scheduler/sim must not depend on $bad"; fail=1
	fi
done

# The shared gang protocol and jobspec contract belong to neither binary.
for shared in gang jobspec; do
	deps=$(go list -deps "./$shared/..." 2>/dev/null)
	for bad in "$mod/driver" "$mod/scheduler"; do
		if grep -q "^$bad\(/\|\$\)" <<<"$deps"; then
			echo "import rule: $shared must not depend on $bad/..."; fail=1
		fi
	done
done

# Test doubles: nomadfake, authtest, testwait, plugintest, testplugin...
# (device/gpu/fake is impact-gpu's production fake backend, not under
# internal/, so it is not one.)
is_double() {
	case "$1" in "$mod"/*internal/*fake | "$mod"/*internal/*fake/*) return 0 ;; esac
	case "$1" in "$mod"/*) ;; *) return 1 ;; esac
	case "${1##*/}" in *test | test*) return 0 ;; esac
	return 1
}
while read -r pkg imports; do
	is_double "$pkg" && continue
	for imp in $imports; do
		if is_double "$imp"; then
			echo "import rule: $pkg (non-test code) imports the test double $imp"; fail=1
		fi
	done
done < <(go list -f '{{.ImportPath}} {{join .Imports " "}}' ./...)

# Direct importers of restricted packages.
while read -r pkg imports; do
	case "$imports" in
	*"github.com/hashicorp/nomad/api"*)
		case "$pkg" in "$mod/scheduler/nomad"|"$mod/scheduler/nomad/"*|"$mod/scheduler/internal/nomadfake"|"$mod/e2e"*) ;;
		*) echo "import rule: only scheduler/nomad (and its fake, scheduler/internal/nomadfake) may import nomad/api, not $pkg"; fail=1;; esac;;
	esac
	case "$imports" in
	*"github.com/NVIDIA/go-nvml"*)
		case "$pkg" in "$mod/device/gpu/nvml"|"$mod/device/gpu/nvml/"*) ;;
		*) echo "import rule: only device/gpu/nvml may import go-nvml, not $pkg"; fail=1;; esac;;
	esac
done < <(go list -f '{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}}' ./...)

# Entry points live in cmd/ (plugin/internal/testplugin is a test double).
while read -r pkg name; do
	[ "$name" = main ] || continue
	case "$pkg" in "$mod/cmd/"*|"$mod/plugin/internal/testplugin") ;;
	*) echo "import rule: $pkg is a main package: entry points live under cmd/"; fail=1;; esac
done < <(go list -f '{{.ImportPath}} {{.Name}}' ./...)

if grep -Eq '^\s*github.com/hashicorp/nomad v' go.mod; then
	echo "import rule: go.mod must not require github.com/hashicorp/nomad (licence)"; fail=1
fi
# The engine's steps (the cycle's fields below, each of a type with its
# own files) own their state: outside a step's files, code calls the
# step's methods and names none of its fields (c.pre.claim(h), never
# c.pre.candCache); the fields are read from the step type's struct. A
# step's files declare its methods, none on the cycle (what steps share
# is in cycle.go, decide.go, shared.go, changes.go, facts.go).
eng=scheduler/engine
steps=(
	"acc accruer accrue.go"
	"holds holdings held.go"
	"judge judger victims.go idle.go gangwatch.go"
	"order orderer queue.go layout.go"
	"place placer admit.go reserve.go"
	"pre preempter preempting.go victimsearch.go"
	"defrag defragger defrag.go"
	"why explainer reasons.go"
	"hr hrCycle headroom.go headroom_prefer.go headroom_budget.go"
	"wall walltimes walltime.go"
	"pace endPace endpace.go"
	"cuts cutter cuts.go"
)
for s in "${steps[@]}"; do
	read -r field typ own <<<"$s"
	# The type's field names: the struct's lines "\tname[, name] Type".
	names=$(cat $(printf "$eng/%s " $own) | awk -v t="$typ" '
		$0 ~ "^type "t" struct" {
			if ($0 ~ /}$/) {x=$0; sub(/^[^{]*\{ */, "", x); split(x, w, / +/); print w[1]; next}
			inside=1; next}
		inside && /^}/ {inside=0}
		inside && /^\t[a-zA-Z_]/ {sub(/^\t/, ""); n=split($0, w, /[ \t]+/); for (i=1; i<=n; i++) {x=w[i]; c=(x ~ /,$/); sub(/,$/, "", x); print x; if (!c) break}}')
	if [ -z "$names" ]; then
		echo "step rule: no fields found for $typ in $own"; fail=1; continue
	fi
	re="\.$field\.($(paste -sd'|' <<<"$names"))\b"
	for o in $own; do
		if hits=$(grep -n '^func (c \*cycle)' "$eng/$o"); then
			echo "step rule: $eng/$o is the $field step's ($typ) file but declares methods on the cycle:"
			echo "$hits" | sed 's/^/    /'; fail=1
		fi
	done
	for f in $(git ls-files --cached --others --exclude-standard "$eng/*.go"); do
		case "$f" in *_test.go) continue ;; esac
		mine=0
		for o in $own; do [ "$f" = "$eng/$o" ] && mine=1; done
		[ $mine = 1 ] && continue
		if hits=$(grep -nE "$re" "$f"); then
			echo "step rule: $f reads or writes fields of the $field step ($typ); call its methods instead:"
			echo "$hits" | sed 's/^/    /'; fail=1
		elif [ $? -gt 1 ]; then
			echo "step rule: grep failed on $f with $re"; fail=1
		fi
	done
done

exit $fail
