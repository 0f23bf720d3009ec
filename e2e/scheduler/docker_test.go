package scheduler

// Gangs of Docker containers, on a real Nomad (one server, two clients of
// 8 fake GPUs each) and a real Docker engine that the test starts on its
// own socket and data root. A gang member is a `impact-exec gang-join`
// prestart task (raw_exec) beside the container task, which reads the
// rendezvous env through a template (the jobspec of
// example/jobs/docker-gang.nomad.hcl, with the test's paths).
// TestDockerGang runs, in order:
//
//   - start together: a 2 x 8 gang whose second member is held before it
//     joins: the first member's container does not start while it waits,
//     both start once it joins, with RANK = alloc index, WORLD_SIZE 2,
//     NODE_RANK 0/1, NNODES 2, MASTER_ADDR/PORT = rank 0's rdzv port, and
//     CUDA_VISIBLE_DEVICES = NVIDIA_VISIBLE_DEVICES = the GPUs Nomad
//     allocated = the agent's pins;
//   - preemption: a critical 1 x 8 job preempts the gang: the checkpoint
//     signal (SIGUSR1) reaches the process in each container, which exits
//     75; the gang goes back to the parking pool, and once the critical job
//     ends it runs again whole as a new generation (epoch 2);
//   - a member killed: `docker kill` of one member's container: the other
//     gets its checkpoint signal, the gang is requeued whole and runs again
//     (epoch 3);
//   - any driver: the same prestart task and template give a raw_exec
//     main task the same rendezvous.
//
// Skipped without nomad on PATH, without dockerd and docker on PATH, or
// when dockerd cannot be started (not root, no overlay/cgroups): the skip
// says which.

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// dockerImage is the tag of the image the test builds: busybox alone.
const dockerImage = "impact-e2e/busybox:1"

// dockerEngine is a dockerd the test started.
type dockerEngine struct {
	sock string // unix:///.../docker.sock
	cli  string // docker CLI
}

func (d *dockerEngine) docker(args ...string) (string, error) {
	out, err := exec.Command(d.cli, append([]string{"-H", d.sock}, args...)...).CombinedOutput()
	return string(out), err
}

// startDocker starts dockerd on a socket and data root of its own (no
// bridge, no iptables: tasks use host networking) and builds dockerImage
// from the host's static busybox with `docker import` (no registry). It
// skips the test, saying why, when that is not possible here.
func startDocker(t *testing.T) *dockerEngine {
	t.Helper()
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		t.Skip("no dockerd on PATH (Debian: apt-get install docker.io)")
	}
	cli, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker CLI on PATH (Debian: apt-get install docker.io)")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox on PATH to build the test image from (Debian: apt-get install busybox-static)")
	}
	if os.Geteuid() != 0 {
		t.Skip("dockerd needs root")
	}
	dir := nomadagent.Dir(t, "impact-e2e-docker-")
	sock := "unix://" + filepath.Join(dir, "docker.sock")
	p := nomadagent.StartProcess(t, "dockerd", nil, dockerd,
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"), "--host", sock,
		"--bridge", "none", "--iptables=false", "--ip-masq=false")
	d := &dockerEngine{sock: sock, cli: cli}
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, err := d.docker("version", "--format", "{{.Server.Version}}")
		if err == nil {
			t.Logf("dockerd %s on %s", strings.TrimSpace(out), sock)
			break
		}
		select {
		case <-p.Exited():
			t.Skipf("dockerd could not start here: %s", tail(p.Output(), 1500))
		default:
		}
		if time.Now().After(deadline) {
			t.Skipf("dockerd not answering after 90s (%v: %s): %s", err, strings.TrimSpace(out), tail(p.Output(), 1500))
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The rootfs: busybox and its applets as symlinks, /tmp.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	for _, dd := range []string{"bin/", "tmp/", "proc/", "sys/", "dev/", "etc/"} {
		_ = tw.WriteHeader(&tar.Header{Name: dd, Typeflag: tar.TypeDir, Mode: 0o1777})
	}
	_ = tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb))})
	_, _ = tw.Write(bb)
	for _, app := range []string{"sh", "sleep", "cat", "env", "echo", "mv", "kill", "ls", "grep", "test", "["} {
		_ = tw.WriteHeader(&tar.Header{Name: "bin/" + app, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cli, "-H", sock, "import", "-", dockerImage)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	return d
}

// dockerGangJob is the docker gang of the test: example/jobs/docker-gang's
// shape with the test's paths. Member 1's gang-join waits for the file
// hold before joining (until it exists). The container writes its env to
// dir/env-<alloc> and CUDA_VISIBLE_DEVICES to dir/<job>-<alloc> (for
// exactGPUs), and on SIGUSR1 writes dir/ckpt-<alloc> and exits 75.
func dockerGangJob(name, impactExec, agentURL, dir, hold string) string {
	return gangJoinJob(name, impactExec, agentURL, dir, hold, "docker")
}

// gangJoinJob is dockerGangJob with a main task of driver docker or
// raw_exec (the same prestart task and template).
func gangJoinJob(name, impactExec, agentURL, dir, hold, driver string) string {
	join := fmt.Sprintf(`if [ "$NOMAD_ALLOC_INDEX" = 1 ]; then until [ -e %s ]; do sleep 0.2; done; fi; `+
		`exec %s gang-join -addr %s -port-label rdzv -node-id "$IMPACT_NODE_ID" -timeout 5m`, hold, impactExec, agentURL)
	script := fmt.Sprintf(`D=%s; A=$NOMAD_ALLOC_ID; echo "$CUDA_VISIBLE_DEVICES" > "$D/$NOMAD_JOB_ID-$A"; `+
		`trap 'echo ckpt > "$D/ckpt-$A"; exit 75' USR1; trap 'exit 143' TERM; `+
		`env > "$D/env-$A.tmp" && mv "$D/env-$A.tmp" "$D/env-$A"; `+
		`while true; do sleep 1 & wait $!; done`, dir)
	mainConfig := fmt.Sprintf(`
        command = "/bin/sh"
        args    = ["-c", %q]`, script)
	if driver == "docker" {
		mainConfig = fmt.Sprintf(`
        image        = %q
        network_mode = "host"
        command      = "/bin/sh"
        args         = ["-c", %q]
        volumes      = [%q]`, dockerImage, script, dir+":"+dir)
	}
	return fmt.Sprintf(`job %q {
  type      = "batch"
  node_pool = "impact-queue"
  meta {
    impact_tier              = "normal"
    impact_checkpoint_signal = "SIGUSR1"
    impact_grace             = "10s"
  }
  group "workers" {
    count = 2
    constraint {
      distinct_hosts = true
    }
    network {
      port "rdzv" {}
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "gang" {
      lifecycle {
        hook    = "prestart"
        sidecar = false
      }
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      env {
        IMPACT_NODE_ID = "${node.unique.id}"
      }
      identity {
        name = "impact"
        aud  = ["impact"]
        file = true
        ttl  = "1h"
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }
    task "t" {
      driver       = %q
      kill_timeout = "5s"
      config {%s
      }
      template {
        source      = "../alloc/impact/gang.env"
        destination = "local/gang.env"
        env         = true
      }
      resources {
        cpu    = 20
        memory = 32
        device "nvidia/gpu" {
          count = 8
        }
      }
    }
  }
}
`, name, join, driver, mainConfig)
}

// containerEnv is what a member's container wrote of its env.
func containerEnv(dir, alloc string) (map[string]string, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "env-"+alloc))
	if err != nil {
		return nil, false
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env, true
}

// checkRendezvous checks the two members' container env: ranks by alloc
// index, one node rank per node, rank 0's port as master, the epoch, and
// NVIDIA_VISIBLE_DEVICES = CUDA_VISIBLE_DEVICES.
func checkRendezvous(t *testing.T, dir string, allocs []lcAlloc, epoch int) {
	t.Helper()
	envs := map[string]map[string]string{}
	eventually(t, 90*time.Second, "both containers wrote their env", func() (bool, string) {
		for _, a := range allocs {
			e, ok := containerEnv(dir, a.ID)
			if !ok {
				return false, "no env of " + a.ID
			}
			envs[a.ID] = e
		}
		return true, ""
	})
	byRank := map[string]map[string]string{}
	nodeRanks := map[string]bool{}
	for id, e := range envs {
		byRank[e["RANK"]] = e
		nodeRanks[e["NODE_RANK"]] = true
		for k, want := range map[string]string{"WORLD_SIZE": "2", "NNODES": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
			"IMPACT_GANG_ID": "default:" + e["NOMAD_JOB_ID"], "IMPACT_GANG_EPOCH": fmt.Sprint(epoch), "RANK": e["NOMAD_ALLOC_INDEX"]} {
			if e[k] != want {
				t.Errorf("alloc %s: %s=%q in the container, want %q", id, k, e[k], want)
			}
		}
		if e["NVIDIA_VISIBLE_DEVICES"] == "" || e["NVIDIA_VISIBLE_DEVICES"] != e["CUDA_VISIBLE_DEVICES"] {
			t.Errorf("alloc %s: NVIDIA_VISIBLE_DEVICES %q, CUDA_VISIBLE_DEVICES %q: want the same GPUs", id, e["NVIDIA_VISIBLE_DEVICES"], e["CUDA_VISIBLE_DEVICES"])
		}
	}
	r0 := byRank["0"]
	if r0 == nil || byRank["1"] == nil || len(nodeRanks) != 2 {
		t.Fatalf("ranks %v, node ranks %v: want 0 and 1 each", slices.Collect(mapKeys(byRank)), nodeRanks)
	}
	for rank, e := range byRank {
		if e["MASTER_ADDR"] != r0["NOMAD_IP_rdzv"] || e["MASTER_PORT"] != r0["NOMAD_HOST_PORT_rdzv"] {
			t.Errorf("rank %s: master %s:%s, want rank 0's rdzv port %s:%s", rank, e["MASTER_ADDR"], e["MASTER_PORT"], r0["NOMAD_IP_rdzv"], r0["NOMAD_HOST_PORT_rdzv"])
		}
	}
	t.Logf("epoch %d: rank 0 = %s, rank 1 = %s, master %s:%s", epoch, r0["NOMAD_ALLOC_ID"], byRank["1"]["NOMAD_ALLOC_ID"], r0["MASTER_ADDR"], r0["MASTER_PORT"])
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// gangLog is a member's gang-join stdout, read from the client's alloc dir.
func gangLog(c *nomadagent.Cluster, alloc string) string {
	for _, cl := range c.Clients {
		if b, err := os.ReadFile(filepath.Join(cl.Dir, "alloc", alloc, "alloc", "logs", "gang.stdout.0")); err == nil {
			return string(b)
		}
	}
	return ""
}

func TestDockerGang(t *testing.T) {
	root := nomadagent.RepoRoot()
	// The example a Docker user starts from is a valid job (file() reads
	// train.py relative to the CLI's directory).
	validate := exec.Command(nomadagent.Binary(t), "job", "validate", filepath.Join("example", "jobs", "docker-gang.nomad.hcl"))
	validate.Dir = root
	if out, err := validate.CombinedOutput(); err != nil {
		t.Fatalf("nomad job validate example/jobs/docker-gang.nomad.hcl: %v\n%s", err, out)
	}
	d := startDocker(t)
	bins := t.TempDir()
	gpu := nomadagent.ImpactBinary(t, bins, "plugins/impact-gpu", "github.com/impact-sched/nomad-impact/cmd/impact-gpu")
	impactExec := nomadagent.ImpactBinary(t, bins, "plugins/impact-exec", "github.com/impact-sched/nomad-impact/cmd/impact-exec")
	impact := nomadagent.ImpactBinary(t, bins, "impact", "github.com/impact-sched/nomad-impact/cmd/impact")
	src := filepath.Join(root, "example", "topologies", "two-islands-8x-a100.hcl")
	c := nomadagent.StartCluster(t, nomadagent.ClusterConfig{
		Prefix:  "impact-e2e-docker-",
		Clients: 2,
		Plugins: map[string]string{"impact-gpu": gpu},
		ClientExtra: func(i int, cl *nomadagent.Client) string {
			// nvidia_runtime = "runc": Nomad's docker driver asks for its
			// GPU runtime whenever a task gets NVIDIA_VISIBLE_DEVICES; the
			// fake GPUs need none (real ones: the NVIDIA container
			// toolkit's "nvidia", the default).
			return fmt.Sprintf(`
plugin "raw_exec" {
  config {
    enabled = true
  }
}
plugin "docker" {
  config {
    endpoint       = %q
    nvidia_runtime = "runc"
    volumes {
      enabled = true
    }
    gc {
      image = false
    }
  }
}
plugin "impact-gpu" {
  config {
    backend            = "fake"
    fake_topology      = %q
    fingerprint_period = "2s"
  }
}
`, d.sock, nomadagent.NodeTopology(t, src, cl.Dir, i))
		},
	})
	c.WaitNodes(90*time.Second, 2, "2 nodes with 8 GPUs and the docker driver", func(ns []nomadagent.Node) (bool, string) {
		ok := true
		var got []string
		for _, nd := range ns {
			var full struct {
				Drivers map[string]struct{ Detected, Healthy bool }
			}
			_ = c.Get("/v1/node/"+nd.ID, &full)
			dk := full.Drivers["docker"]
			got = append(got, fmt.Sprintf("%s: %d GPUs, docker %+v", nd.Name, nd.Devices("gpu"), dk))
			ok = ok && nd.Devices("gpu") == 8 && dk.Healthy
		}
		return ok, strings.Join(got, "; ")
	})
	e := &lcEnv{c: c, env: &env{t: t, a: c.Agent, dir: c.Dir, impact: impact,
		policyExtra: "gangs {\n  missing_member_grace = \"5s\"\n}\n",
		apiURL:      fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])}}
	e.impactProc = e.startImpact(t)

	shared := t.TempDir()
	hold := filepath.Join(shared, "hold")
	const name = "dgang"
	runHCL(t, c.Agent, c.Dir, name, dockerGangJob(name, impactExec, e.apiURL, shared, hold))

	// 1. Member 0 waits at the barrier for member 1, which is held: its
	// container must not start.
	var first []lcAlloc
	eventually(t, 120*time.Second, "member 0 at the barrier, member 1 held", func() (bool, string) {
		as := e.allocsOf(name)
		var logs []string
		waiting := false
		for _, a := range as {
			l := gangLog(c, a.ID)
			logs = append(logs, a.ID+": "+l)
			waiting = waiting || strings.Contains(l, "1 of 2 members arrived")
		}
		first = as
		return len(as) == 2 && waiting, fmt.Sprintf("%v; explain %s", logs, e.explain(name))
	})
	for _, a := range first {
		if _, ok := containerEnv(shared, a.ID); ok {
			t.Fatalf("alloc %s: the container started while its gang waited for a member", a.ID)
		}
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	first = e.waitRunningN(name, 2, 90*time.Second)
	checkRendezvous(t, shared, first, 1)
	exactGPUs(t, c.Agent, e.apiURL, shared, name, 2)

	// 2. A critical job preempts the gang: the checkpoint signal reaches
	// the process in each container; requeued whole, runs again after.
	release := filepath.Join(shared, "release-critical")
	runHCL(t, c.Agent, c.Dir, "dcrit", parkedGPUJob("dcrit", map[string]string{"impact_tier": "critical"}, 1, 8,
		fmt.Sprintf("until [ -e %s ]; do sleep 0.2; done", release)))
	eventually(t, 120*time.Second, "checkpoint signal in both containers", func() (bool, string) {
		var missing []string
		for _, a := range first {
			if _, err := os.Stat(filepath.Join(shared, "ckpt-"+a.ID)); err != nil {
				missing = append(missing, a.ID)
			}
		}
		return len(missing) == 0, fmt.Sprintf("no checkpoint from %v; %+v; explain %s", missing, e.allocsOf(name), e.explain(name))
	})
	eventually(t, 60*time.Second, name+" back in the parking pool", func() (bool, string) {
		j := e.job(name)
		return j.NodePool == "impact-queue" && len(e.running(name)) == 0, fmt.Sprintf("%+v; explain %s", j, e.explain(name))
	})
	// The agent saw the containers' exit 75 after the signal: requeued,
	// not merely stopped at the end of the grace.
	eventually(t, 30*time.Second, "preemption outcome requeued", func() (bool, string) {
		v := e.metric(`impact_preemption_outcomes_total{outcome="requeued"}`)
		return v != "" && v != "0", "impact_preemption_outcomes_total{outcome=\"requeued\"} = " + v
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	second := e.waitRunningN(name, 2, 120*time.Second)
	for _, a := range second {
		if a.ID == first[0].ID || a.ID == first[1].ID {
			t.Fatalf("after the preemption %s runs in %s, an allocation of its first run", name, a.ID)
		}
	}
	checkRendezvous(t, shared, second, 2)

	// 3. One member's container killed: the other gets its checkpoint
	// signal and the gang is requeued whole, then runs again.
	victim, peer := second[0], second[1]
	if out, err := d.docker("kill", "t-"+victim.ID); err != nil {
		t.Fatalf("docker kill t-%s: %v\n%s", victim.ID, err, out)
	}
	killed := time.Now()
	eventually(t, 90*time.Second, "the surviving member checkpointed", func() (bool, string) {
		_, err := os.Stat(filepath.Join(shared, "ckpt-"+peer.ID))
		return err == nil, fmt.Sprintf("%+v; explain %s", e.allocsOf(name), e.explain(name))
	})
	var third []lcAlloc
	eventually(t, 120*time.Second, name+" running whole again as a new pair", func() (bool, string) {
		third = e.running(name)
		fresh := 0
		for _, a := range third {
			if a.ID != victim.ID && a.ID != peer.ID {
				fresh++
			}
		}
		return len(third) == 2 && fresh == 2, fmt.Sprintf("%+v; explain %s", e.allocsOf(name), e.explain(name))
	})
	t.Logf("member killed: the peer checkpointed and the gang ran whole again %s after the kill", time.Since(killed).Round(time.Second))
	checkRendezvous(t, shared, third, 3)
	noRollbacks(t, e.apiURL)
	e.purgeAll(name, "dcrit")

	// 4. The same prestart task and template give a raw_exec task the
	// same rendezvous: the mechanism does not depend on the driver.
	runHCL(t, c.Agent, c.Dir, "rgang", gangJoinJob("rgang", impactExec, e.apiURL, shared, hold, "raw_exec"))
	checkRendezvous(t, shared, e.waitRunningN("rgang", 2, 120*time.Second), 1)
	e.purgeAll("rgang")
}
