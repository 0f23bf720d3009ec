package driver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/internal/authtest"
)

// joinServer is a rendezvous server authenticating members with workload
// identities signed by a fake Nomad, as the impact agent does.
func joinServer(t *testing.T) (*gang.Server, *authtest.Nomad) {
	t.Helper()
	n := authtest.New(t)
	ids, acl := n.Verifiers(t)
	srv, err := gang.StartServerWith("127.0.0.1:0", gang.RegistryConfig{}, gang.ServerOptions{Auth: &gang.NomadAuth{Identities: ids, ACL: acl}}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv, n
}

// memberEnv is the Nomad task env of the gang-join task of allocation
// alloc (index i) of job ml/train, with its identity file written when n
// is given.
func memberEnv(t *testing.T, n *authtest.Nomad, alloc string, i int) map[string]string {
	t.Helper()
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	allocDir := filepath.Join(dir, "alloc")
	for _, d := range []string{secrets, allocDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if n != nil {
		jwt := n.Sign(t, authtest.Claims{Namespace: "ml", JobID: "train", AllocID: alloc, Task: "gang", Audience: []string{"impact"}, Expiry: time.Now().Add(time.Hour)})
		if err := os.WriteFile(filepath.Join(secrets, "nomad_impact.jwt"), []byte(jwt), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]string{
		"NOMAD_NAMESPACE": "ml", "NOMAD_JOB_ID": "train", "NOMAD_ALLOC_ID": alloc,
		"NOMAD_ALLOC_NAME": "train.workers[" + string(rune('0'+i)) + "]", "NOMAD_ALLOC_INDEX": string(rune('0' + i)),
		"NOMAD_GROUP_NAME": "workers", "NOMAD_TASK_NAME": "gang",
		"NOMAD_SECRETS_DIR": secrets, "NOMAD_ALLOC_DIR": allocDir,
		"NOMAD_IP_rdzv": "10.0.0." + string(rune('1'+i)), "NOMAD_HOST_PORT_rdzv": "2950" + string(rune('0'+i)),
	}
}

// joinOpts are gang-join's options for the member with task env env: its
// flags' defaults, with the port label rdzv and a 200ms heartbeat.
func joinOpts(url string, env map[string]string) GangJoinOptions {
	return GangJoinOptions{Addr: url, Out: filepath.Join(env["NOMAD_ALLOC_DIR"], GangEnvFile), Timeout: 10 * time.Minute,
		Heartbeat: 200 * time.Millisecond, PortLabel: "rdzv", MasterPort: 29500, NodeID: "node", Identity: gang.IdentityName}
}

// readGangEnv parses an env file the way Nomad's template env = true does
// for what GangEnv writes: KEY="JSON string" lines, # comments.
func readGangEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q has no =", line)
		}
		var s string
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			t.Fatalf("line %q: value is not a double-quoted JSON string: %v", line, err)
		}
		env[k] = s
	}
	return env
}

// Two members, the second 500ms late: neither passes the barrier before
// both have joined; each gets its rank in its allocation's env file, the
// master is rank 0's port, and the members are reported done so the gang
// ends (a requeued run is a new generation).
func TestGangJoinTwoMembers(t *testing.T) {
	t.Parallel()
	srv, n := joinServer(t)
	envs := []map[string]string{memberEnv(t, n, "a0", 0), memberEnv(t, n, "a1", 1)}
	type result struct {
		a    gang.Assignment
		err  error
		done time.Time
	}
	results := make([]chan result, 2)
	var secondJoined time.Time
	for i, env := range envs {
		results[i] = make(chan result, 1)
		o := joinOpts(srv.URL, env)
		o.Size, o.NodeID = 2, "node-"+string(rune('a'+i))
		if i == 1 {
			time.Sleep(500 * time.Millisecond)
			secondJoined = time.Now()
		}
		go func() {
			var out bytes.Buffer
			a, err := GangJoin(context.Background(), o, env, &out)
			results[i] <- result{a, err, time.Now()}
		}()
	}
	var got [2]result
	for i := range results {
		select {
		case got[i] = <-results[i]:
		case <-time.After(30 * time.Second):
			t.Fatalf("member %d still waiting", i)
		}
		if got[i].err != nil {
			t.Fatalf("member %d: %v", i, got[i].err)
		}
	}
	if got[0].done.Before(secondJoined) {
		t.Errorf("the first member passed the barrier at %s, before the second joined at %s", got[0].done, secondJoined)
	}
	for i, env := range envs {
		file := filepath.Join(env["NOMAD_ALLOC_DIR"], GangEnvFile)
		e := readGangEnv(t, file)
		want := map[string]string{
			"WORLD_SIZE": "2", "RANK": string(rune('0' + i)), "NODE_RANK": string(rune('0' + i)), "NNODES": "2",
			"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
			"IMPACT_GANG_ID": "ml:train", "IMPACT_GANG_EPOCH": "1",
		}
		for k, v := range want {
			if e[k] != v {
				t.Errorf("member %d: %s=%q in %s, want %q (file: %v)", i, k, e[k], file, v, e)
			}
		}
		if len(e) != len(want) {
			t.Errorf("member %d: %d variables, want %d: %v", i, len(e), len(want), e)
		}
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("member %d: %s: %v (%v), want mode 0644 so the main task's user reads it", i, file, fi, err)
		}
	}
	// Both members reported their end: the gang is done.
	c, _ := gang.NewClient(srv.URL, nil)
	tok := n.Sign(t, authtest.Claims{Namespace: "ml", JobID: "train", AllocID: "a0", Task: "gang", Audience: []string{"impact"}, Expiry: time.Now().Add(time.Hour)})
	st, err := c.WithCredential(gang.IdentityCredential{Env: tok}).GetMember(context.Background(), "ml:train", "a0.gang", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != gang.StateDone {
		t.Errorf("gang state %s after both members wrote their env, want done (reason %q)", st.State, st.Reason)
	}

	// A requeued run (new allocations) rendezvouses again as a new
	// generation.
	again := []map[string]string{memberEnv(t, n, "b0", 0), memberEnv(t, n, "b1", 1)}
	errs := make(chan error, 2)
	for _, env := range again {
		o := joinOpts(srv.URL, env)
		o.Size = 2
		go func() {
			_, err := GangJoin(context.Background(), o, env, &bytes.Buffer{})
			errs <- err
		}()
	}
	for range again {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if e := readGangEnv(t, filepath.Join(again[1]["NOMAD_ALLOC_DIR"], GangEnvFile)); e["IMPACT_GANG_EPOCH"] != "2" || e["RANK"] != "1" {
		t.Errorf("requeued run: %v, want epoch 2 and rank 1", e)
	}
}

// Without the task's workload identity the join is refused at once, with
// a message saying where the identity was looked for, and no env file is
// left (an old one is removed first).
func TestGangJoinWithoutIdentity(t *testing.T) {
	t.Parallel()
	srv, _ := joinServer(t)
	env := memberEnv(t, nil, "a0", 0)
	out := filepath.Join(env["NOMAD_ALLOC_DIR"], GangEnvFile)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte("RANK=\"0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	o := joinOpts(srv.URL, env)
	o.Size = 2
	_, err := GangJoin(context.Background(), o, env, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "nomad_impact.jwt") {
		t.Fatalf("err = %v, want a 401 naming secrets/nomad_impact.jwt", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusal took %s: a refused credential is not retried", d)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after a failed join (%v): the main task would start with a stale rank", out, err)
	}
}

// A member alone at the barrier times out, leaves the gang and writes
// nothing.
func TestGangJoinTimeout(t *testing.T) {
	t.Parallel()
	srv, n := joinServer(t)
	env := memberEnv(t, n, "a0", 0)
	o := joinOpts(srv.URL, env)
	o.Size, o.Timeout = 2, time.Second
	_, err := GangJoin(context.Background(), o, env, &bytes.Buffer{})
	var te *gang.TimeoutError
	if !errors.As(err, &te) || te.Arrived != 1 || te.Size != 2 {
		t.Fatalf("err = %v, want a barrier timeout with 1 of 2 arrived", err)
	}
	if _, err := os.Stat(filepath.Join(env["NOMAD_ALLOC_DIR"], GangEnvFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env file written after a timeout (%v)", err)
	}
}

// A port label the group does not have is named.
func TestGangJoinRequestPortLabel(t *testing.T) {
	t.Parallel()
	_, _, _, err := gangJoinRequest(GangJoinOptions{Addr: "http://x:1", PortLabel: "rdzv", MasterPort: 29500, Heartbeat: time.Second},
		map[string]string{"NOMAD_JOB_ID": "j", "NOMAD_ALLOC_ID": "a", "NOMAD_TASK_NAME": "t"})
	if err == nil || !strings.Contains(err.Error(), "NOMAD_HOST_PORT_rdzv") {
		t.Errorf("missing port label: %v", err)
	}
}

// example/jobs/docker-gang.nomad.hcl runs gang-join as a prestart task with
// the "impact" identity, and its main task's template reads the file
// gang-join writes.
func TestGangJoinDockerExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "example", "jobs", "docker-gang.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`hook\s*=\s*"prestart"`,
		`args\s*=\s*\["gang-join"`,
		`name\s*=\s*"` + gang.IdentityName + `"`,
		`file\s*=\s*true`,
		`source\s*=\s*"\.\./alloc/` + regexp.QuoteMeta(GangEnvFile) + `"`,
		`env\s*=\s*true`,
		`driver\s*=\s*"docker"`,
	} {
		if !regexp.MustCompile(re).Match(b) {
			t.Errorf("docker-gang.nomad.hcl has no %s", re)
		}
	}
}
