package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/driver"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/internal/version"
	"github.com/impact-sched/nomad-impact/plugin"
	"github.com/impact-sched/nomad-impact/plugin/plugintest"
)

// binary is impact-exec built once for the tests that run it as a Nomad
// client or an operator does.
var binary string

func TestMain(m *testing.M) {
	os.Exit(plugintest.RunWithMain(m, "../impact-exec", &binary))
}

// `impact-exec gang-server -dev` serves the rendezvous endpoint, without
// authentication, until SIGTERM.
func TestGangServerSubcommand(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(binary, "gang-server", "-dev", "-listen", addr, "-ttl", "10s")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c, _ := gang.NewClient("http://"+addr, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.Join(context.Background(), "g", "a.t", gang.JoinRequest{Size: 1, JobID: "j", AllocID: "a", Task: "t",
			NodeID: "n", Addr: "127.0.0.1", Port: 1})
		if err == nil {
			if st.State != gang.StateReady {
				t.Fatalf("gang of one: %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gang-server not serving: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gang-server exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("gang-server did not stop on SIGTERM")
	}
}

// Run by hand (no Nomad magic cookie) the binary explains itself instead
// of serving; -h lists the subcommands it really has; -version prints it.
func TestRunByHand(t *testing.T) {
	t.Parallel()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, plugin.MagicCookieKey+"=") {
			env = append(env, kv)
		}
	}
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(binary, args...)
		cmd.Env = env
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), code
	}
	out, errOut, code := run()
	if code != 1 || out != "" || !strings.Contains(errOut, "not meant to be run by hand") || !strings.Contains(errOut, `plugin "impact-exec"`) {
		t.Fatalf("by hand: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = run("-h")
	if code != 0 || !strings.Contains(out, "supervise DIR") || !strings.Contains(out, "gang-server -nomad-addr URL [-listen") || !strings.Contains(out, "gang-server -dev") {
		t.Fatalf("-h: exit %d: %q", code, out)
	}
	if out, _, code = run("-version"); code != 0 || !strings.HasPrefix(out, driver.PluginName+" "+version.Version) {
		t.Fatalf("-version: exit %d: %q", code, out)
	}
	if _, errOut, code = run("bogus"); code != 2 || !strings.Contains(errOut, `unknown argument "bogus"`) {
		t.Fatalf("bogus: exit %d: %q", code, errOut)
	}
	// The gang-server flags -h shows are the ones it takes.
	if _, errOut, code = run("gang-server", "-h"); code != 0 || !strings.Contains(errOut, "-listen") || !strings.Contains(errOut, "-ttl") {
		t.Fatalf("gang-server -h: exit %d: %q", code, errOut)
	}
}
