package nomadfake

import (
	"embed"
	"encoding/json"
	"net/http"
	"strings"
)

// The recorded answers of a real Nomad 2.0.6 agent. Nomad's server structs
// carry a few fields the api package's structs lack (e.g. a job list
// stub's NodePool, a node's ComputedClass); the fake adds them, with zero
// values, so its answers have every key the real agent's have.
//
//go:embed testdata/job-parked.json testdata/jobs-list.json testdata/alloc-running.json
//go:embed testdata/allocs-running.json testdata/node.json testdata/nodes.json testdata/node-pools.json
var recorded embed.FS

var templates = func() map[string]any {
	load := func(name string, first bool) any {
		b, err := recorded.ReadFile("testdata/" + name)
		if err != nil {
			panic(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			panic(err)
		}
		if first {
			return v.([]any)[0]
		}
		return v
	}
	return map[string]any{
		"job":       load("job-parked.json", false),
		"jobstub":   load("jobs-list.json", true),
		"alloc":     load("alloc-running.json", false),
		"allocstub": load("allocs-running.json", true),
		"node":      load("node.json", false),
		"nodestub":  load("nodes.json", true),
		"pool":      load("node-pools.json", true),
	}
}()

// templateFor names the recorded answer shape of a GET path, or "".
func templateFor(r *http.Request) (string, bool) {
	if r.Method != http.MethodGet {
		return "", false
	}
	p := r.URL.Path
	switch {
	case p == "/v1/jobs":
		return "jobstub", true
	case p == "/v1/allocations":
		return "allocstub", true
	case p == "/v1/nodes":
		return "nodestub", true
	case p == "/v1/node/pools":
		return "pool", true
	case strings.HasPrefix(p, "/v1/node/pool/"):
		return "pool", false
	case strings.HasPrefix(p, "/v1/node/"):
		return "node", false
	case strings.HasPrefix(p, "/v1/allocation/") && strings.Count(p, "/") == 3:
		return "alloc", false
	case strings.HasPrefix(p, "/v1/job/"):
		rest := strings.TrimPrefix(p, "/v1/job/")
		if !strings.Contains(rest, "/") {
			return "job", false
		}
		if strings.HasSuffix(rest, "/allocations") {
			return "allocstub", true
		}
	}
	return "", false
}

// shape re-encodes v with the keys of the named template that it lacks.
func shape(v any, tmpl string, list bool) any {
	t := templates[tmpl]
	if t == nil {
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var g any
	if err := json.Unmarshal(b, &g); err != nil {
		return v
	}
	if list {
		if arr, ok := g.([]any); ok {
			for _, e := range arr {
				fill(e, t)
			}
		}
		return g
	}
	fill(g, t)
	return g
}

// fill adds to got (recursively, through struct-like keys) every key of
// tmpl it lacks, with the zero value of its JSON kind.
func fill(got, tmpl any) {
	switch t := tmpl.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return
		}
		for k, tv := range t {
			if k == "" || k[0] < 'A' || k[0] > 'Z' {
				continue
			}
			gv, ok := g[k]
			if !ok {
				g[k] = zeroOf(tv)
				continue
			}
			fill(gv, tv)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(t) == 0 {
			return
		}
		for _, e := range g {
			fill(e, t[0])
		}
	}
}

func zeroOf(v any) any {
	switch v.(type) {
	case string:
		return ""
	case float64:
		return 0
	case bool:
		return false
	}
	return nil
}
