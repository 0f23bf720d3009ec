package cluster

import (
	"strconv"
	"strings"
)

// Version constraints (Nomad's version and semver operators) on device
// attributes.

// A version constraint the model evaluates: comma-separated checks of
// plain numeric versions ("v"? digits and dots, no pre-release or build
// part). Anything else is left to Nomad (MayMatch).
type verCheck struct {
	op  string
	v   []int64
	set int // segments written (before padding)
}

func parseVersion(s string) ([]int64, bool) {
	s = strings.TrimPrefix(s, "v")
	if s == "" {
		return nil, false
	}
	parts := strings.Split(s, ".")
	v := make([]int64, 0, max(3, len(parts)))
	for _, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return nil, false
		}
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, false
		}
		v = append(v, n)
	}
	for len(v) < 3 {
		v = append(v, 0)
	}
	return v, true
}

func parseVersionConstraint(s string, semver bool) ([]verCheck, bool) {
	var out []verCheck
	for _, one := range strings.Split(s, ",") {
		one = strings.TrimSpace(one)
		op := ""
		for _, o := range []string{"<=", ">=", "!=", "~>", "<", ">", "="} {
			if strings.HasPrefix(one, o) {
				op = o
				break
			}
		}
		if op == "~>" && semver {
			return nil, false
		}
		rest := strings.TrimSpace(one[len(op):])
		v, ok := parseVersion(rest)
		if !ok {
			return nil, false
		}
		out = append(out, verCheck{op: op, v: v, set: len(strings.Split(strings.TrimPrefix(rest, "v"), "."))})
	}
	return out, true
}

func compareVersions(a, b []int64) int {
	for i := range max(len(a), len(b)) {
		var x, y int64
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}

func (vc verCheck) check(v []int64) bool {
	c := compareVersions(v, vc.v)
	switch vc.op {
	case "", "=":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	case "~>":
		// At least the version, and the same in every segment written
		// but the last ("~> 1.2": 1.x from 1.2; "~> 1.2.3": 1.2.x from
		// 1.2.3).
		if c < 0 || len(vc.v) > len(v) {
			return false
		}
		for i := 0; i < vc.set-1; i++ {
			if v[i] != vc.v[i] {
				return false
			}
		}
		return vc.v[len(vc.v)-1] <= v[len(vc.v)-1]
	}
	return false
}
