package executor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/driver/internal/nomadbarrier"
	"github.com/impact-sched/nomad-impact/gang"
)

// forwarded are the signals the supervisor relays to the task's process
// group (SIGKILL and SIGSTOP cannot be caught; the plugin sends SIGKILL to
// the group directly).
var forwarded = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1,
	syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGCONT, syscall.SIGTSTP, syscall.SIGWINCH,
	syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGXCPU, syscall.SIGPROF, syscall.SIGVTALRM,
}

// terminating signals abort a wait at the gang barrier.
func terminating(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGQUIT || s == syscall.SIGHUP
}

type supervisor struct {
	dir    string
	spec   Spec
	logger hclog.Logger
	now    func() time.Time

	evMu   sync.Mutex
	events *os.File

	assign      gang.Assignment // set once the barrier passed
	nomad       *nomadbarrier.NomadClient
	nomadAllocs []string  // members in rank order (nomad discovery)
	passedAt    time.Time // when a Nomad barrier returned

	mu          sync.Mutex
	pgid        int // 0 until the child runs
	stopSig     os.Signal
	gangStopped bool
	// watchingKids: an endLauncher is waiting on the children that got
	// the checkpoint signal.
	watchingKids bool
	// checkpointAt: when the checkpoint signal was last delivered.
	checkpointAt time.Time
	childDone    chan struct{}
}

// Supervise is the body of `impact-exec supervise DIR`: it runs the task
// described by DIR/spec.json to completion and writes DIR/exit.json. It
// returns the supervisor's own exit code (0 once exit.json is written).
func Supervise(dir string, logger hclog.Logger) int {
	s := &supervisor{dir: dir, logger: logger.Named("supervisor"), now: time.Now, childDone: make(chan struct{})}
	ev, err := os.OpenFile(filepath.Join(dir, EventsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.logger.Error("cannot open events file", "error", err)
		return 1
	}
	s.events = ev
	defer ev.Close()
	if err := readJSON(dir, SpecFile, &s.spec); err != nil {
		return s.finish(Exit{ExitCode: 1, Err: fmt.Sprintf("reading task spec: %v", err)})
	}
	if err := s.spec.Validate(); err != nil {
		return s.finish(Exit{ExitCode: 1, Err: fmt.Sprintf("invalid task spec: %v", err)})
	}
	if err := writeJSONAtomic(dir, SpecFile, s.spec.redacted()); err != nil {
		s.logger.Warn("removing the task env from the spec file", "error", err)
	}
	return s.run()
}

// redacted is the spec as kept on disk once the supervisor has read it:
// the env's values (Vault and workload identity tokens among them) and the
// Nomad token are dropped, since the state dir lies in the task dir that
// `nomad alloc fs` can read. The keys stay, for debugging.
func (s Spec) redacted() Spec {
	env := make(map[string]string, len(s.Env))
	for k := range s.Env {
		env[k] = redactedValue
	}
	s.Env = env
	if s.Gang != nil {
		g := *s.Gang
		if g.NomadToken != "" {
			g.NomadToken = redactedValue
		}
		if g.IdentityToken != "" {
			g.IdentityToken = redactedValue
		}
		s.Gang = &g
	}
	return s
}

const redactedValue = "(redacted)"

func (s *supervisor) run() int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	// A broken stderr must not kill the supervisor: without a Notify for
	// SIGPIPE, a write to a broken pipe on fd 1 or 2 kills a Go program
	// (os/signal, "SIGPIPE").
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	barrierCtx, cancelBarrier := context.WithCancel(context.Background())
	defer cancelBarrier()
	go s.relaySignals(sigs, cancelBarrier)

	// Tell the plugin the signal handlers are in place.
	if err := writeJSONAtomic(s.dir, StatusFile, Status{Phase: PhaseStarting, SupervisorPID: os.Getpid()}); err != nil {
		return s.finish(Exit{ExitCode: 1, Err: err.Error()})
	}

	env := make(map[string]string, len(s.spec.Env)+10)
	for k, v := range s.spec.Env {
		env[k] = v
	}
	st := Status{Phase: PhaseRunning, SupervisorPID: os.Getpid()}

	var client *gang.Client
	if g := s.spec.Gang; g != nil {
		st.Phase = PhaseBarrier
		if err := writeJSONAtomic(s.dir, StatusFile, st); err != nil {
			return s.finish(Exit{ExitCode: 1, Err: err.Error()})
		}
		var err error
		if g.Discovery == "nomad" {
			s.nomad, err = nomadbarrier.NewNomadClient(g.NomadAddr, g.NomadToken)
		} else {
			client, err = rendezvousClient(g)
		}
		if err != nil {
			return s.finish(Exit{ExitCode: 1, Err: err.Error()})
		}
		size := "all of the job's"
		if g.Join.Size > 0 {
			size = strconv.Itoa(g.Join.Size)
		}
		s.event(fmt.Sprintf("Waiting at gang barrier %s for %s members (timeout %s)", g.ID, size, g.Timeout), nil)
		progress := func(arrived, size int) {
			if arrived < size {
				s.event(fmt.Sprintf("Gang %s: %d of %d members arrived", g.ID, arrived, size),
					map[string]string{"gang_arrived": strconv.Itoa(arrived), "gang_size": strconv.Itoa(size)})
			}
		}
		var a gang.Assignment
		if s.nomad != nil {
			a, s.nomadAllocs, err = s.nomad.NomadBarrier(barrierCtx, nomadbarrier.NomadBarrierConfig{
				Gang: g.ID, Namespace: g.Join.Namespace, Service: g.Service, AllocID: g.Join.AllocID,
				Size: g.Join.Size, JobID: g.Join.JobID, Timeout: g.Timeout, Poll: g.Heartbeat, Progress: progress})
			s.passedAt = s.now()
		} else {
			a, err = client.Barrier(barrierCtx, gang.BarrierConfig{
				Gang: g.ID, Member: g.Member, Join: g.Join, Timeout: g.Timeout, Heartbeat: g.Heartbeat,
				Progress: func(gs gang.Status) { progress(gs.Arrived, gs.Size) },
			})
		}
		if err != nil {
			return s.barrierFailed(err)
		}
		s.assign = a
		for k, v := range a.Env() {
			env[k] = v
		}
		st.GangEnv = a.Env()
		s.event(fmt.Sprintf("Gang %s complete: rank %d of %d (node rank %d of %d, local rank %d of %d), master %s:%d",
			g.ID, a.Rank, a.WorldSize, a.NodeRank, a.NNodes, a.LocalRank, a.LocalWorldSize, a.MasterAddr, a.MasterPort),
			map[string]string{"rank": strconv.Itoa(a.Rank), "world_size": strconv.Itoa(a.WorldSize)})
	}

	if f := s.spec.RequeueFile; f != "" {
		// A requeue file left by an earlier run of this task (a restart
		// in place keeps the task dir) says nothing about this one.
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.logger.Warn("removing a stale requeue file", "file", f, "error", err)
		}
		env[RequeueFileEnv] = f
	}
	s.warnLauncher()
	cmd, err := s.command(env)
	if err != nil {
		s.reportGangExit(client, gang.ExitRequest{ExitCode: 1, Reason: err.Error()})
		return s.finish(Exit{ExitCode: 1, Err: err.Error()})
	}
	// The task gets Nomad's oom_score_adj, not the plugin's: set here for
	// the child to inherit, as Nomad's executor sets its own.
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(int(s.spec.Resources.OOMScoreAdj))), 0o644); err != nil {
		s.logger.Warn("setting oom_score_adj", "error", err)
	}
	cg, err := setupCgroups(cgroupName(s.spec.TaskID), s.spec.Resources)
	if err != nil {
		s.event(fmt.Sprintf("Resource limits not enforced: %v", err), nil)
	}
	cg.prepare(cmd.SysProcAttr)
	defer cg.remove()
	// Record the cgroups before the command can run in them: if this
	// supervisor dies, the plugin finds them there and cleans them up.
	st.Cgroups = cg.set()
	if st.Cgroups != nil {
		pre := st
		if pre.Phase == PhaseRunning {
			pre.Phase = PhaseStarting // no command yet
		}
		if err := writeJSONAtomic(s.dir, StatusFile, pre); err != nil {
			s.logger.Error("writing status", "error", err)
		}
	}
	s.mu.Lock()
	if s.stopSig != nil {
		// Stopped between the barrier and the start.
		sig := s.stopSig
		s.mu.Unlock()
		s.reportGangExit(client, gang.ExitRequest{Stopped: true, Reason: "stopped before start"})
		return s.finish(Exit{ExitCode: 128 + sigNum(sig), Signal: sigNum(sig), Stopped: true})
	}
	if err := cg.start(cmd, func(msg string) { s.event(msg, nil) }); err != nil {
		s.mu.Unlock()
		msg := fmt.Sprintf("starting %s: %v", s.spec.Command, err)
		s.reportGangExit(client, gang.ExitRequest{ExitCode: 1, Reason: msg})
		return s.finish(Exit{ExitCode: 1, Err: msg})
	}
	s.pgid = cmd.Process.Pid
	s.mu.Unlock()
	closeFiles(cmd)

	st.Phase, st.ChildPID, st.StartedAt = PhaseRunning, cmd.Process.Pid, s.now()
	if ps, err := procStat(cmd.Process.Pid); err == nil {
		st.ChildStart = ps.start
	}
	if err := writeJSONAtomic(s.dir, StatusFile, st); err != nil {
		s.logger.Error("writing status", "error", err)
	}
	s.logger.Info("task started", "pid", cmd.Process.Pid)

	switch {
	case client != nil:
		go s.monitorGang(client)
	case s.nomad != nil:
		go s.monitorNomad()
	}
	werr := cmd.Wait()
	close(s.childDone)
	// Clean up whatever else is left in the task's process group, and in
	// its cgroup (processes that left the group with setsid/setpgid).
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cg.killAll()

	ex := Exit{}
	if ex.ExitCode, ex.Signal, werr = ExitStatus(werr); werr != nil {
		ex.ExitCode, ex.Err = 1, fmt.Sprintf("waiting for task: %v", werr)
	}
	ex.OOMKilled = cg.oomKilled()
	cg.remove()
	if ex.OOMKilled {
		s.event("OOM killed: the task exceeded its memory limit", map[string]string{"oom_killed": "true"})
	}
	s.applyRequeueFile(&ex)
	s.mu.Lock()
	ex.Stopped = s.gangStopped || fileExists(filepath.Join(s.dir, StopFile))
	gangStopped := s.gangStopped
	s.mu.Unlock()
	if gangStopped {
		ex.Err = "stopped because its gang failed or was stopped"
	}
	s.reportGangExit(client, gang.ExitRequest{ExitCode: ex.ExitCode, Signal: ex.Signal, Stopped: ex.Stopped})
	if s.nomad != nil && !ex.Stopped {
		s.holdRegistration()
	}
	return s.finish(ex)
}

// holdRegistration keeps a member that passed a Nomad barrier from ending
// before nomadbarrier.NomadHold has passed since, so its service registration
// (which Nomad removes when the task ends) is seen by every member still
// polling: without it, a member whose command ends at once can strand a
// slower one at the barrier. A stop ends the wait.
func (s *supervisor) holdRegistration() {
	left := nomadbarrier.NomadHold(s.spec.Gang.Heartbeat) - s.now().Sub(s.passedAt)
	if left <= 0 {
		return
	}
	s.event(fmt.Sprintf("Task ended %s after gang %s formed: keeping its Nomad service registration %s longer so every member sees the gang complete",
		s.now().Sub(s.passedAt).Round(time.Millisecond), s.spec.Gang.ID, left.Round(time.Millisecond)), nil)
	deadline := time.NewTimer(left)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return
		case <-tick.C:
			if fileExists(filepath.Join(s.dir, StopFile)) {
				return
			}
		}
	}
}

// relaySignals forwards signals to the task's process group. Before the
// task has started (gang barrier), a terminating signal, or any signal
// after the plugin has marked a stop (the stop file), aborts the start.
func (s *supervisor) relaySignals(sigs <-chan os.Signal, cancelBarrier context.CancelFunc) {
	for sig := range sigs {
		s.mu.Lock()
		pgid := s.pgid
		stopSig, stopping := s.stopSignal()
		abort := pgid == 0 && (terminating(sig) || stopping)
		if abort && s.stopSig == nil {
			s.stopSig = sig
			if stopSig != 0 {
				// The plugin's stop names the signal Nomad asked for (it
				// may be one the supervisor cannot catch, like SIGKILL).
				s.stopSig = stopSig
			}
		}
		s.mu.Unlock()
		if pgid == 0 {
			if abort {
				s.logger.Info("stop requested before the task started", "signal", sig)
				cancelBarrier()
			}
			continue
		}
		if s.isCheckpoint(sig) && !stopping {
			s.sendCheckpoint(pgid, sig.(syscall.Signal))
			continue
		}
		if err := syscall.Kill(-pgid, sig.(syscall.Signal)); err != nil {
			s.logger.Warn("forwarding signal", "signal", sig, "error", err)
		}
	}
}

// stopSignal reports whether the plugin has marked a stop, and the signal
// it named (0 if none or unreadable).
func (s *supervisor) stopSignal() (syscall.Signal, bool) {
	b, err := os.ReadFile(filepath.Join(s.dir, StopFile))
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 || n > 64 {
		return 0, true
	}
	return syscall.Signal(n), true
}

func (s *supervisor) barrierFailed(err error) int {
	var te *gang.TimeoutError
	var se *gang.StoppedError
	var le *nomadbarrier.LostError
	s.mu.Lock()
	stopSig := s.stopSig
	s.mu.Unlock()
	switch {
	case stopSig != nil:
		s.event("Stopped while waiting at the gang barrier", nil)
		return s.finish(Exit{ExitCode: 128 + sigNum(stopSig), Signal: sigNum(stopSig), Stopped: true,
			Err: "stopped while waiting at the gang barrier"})
	case errors.As(err, &te):
		why := ""
		if te.JoinErr != nil {
			why = fmt.Sprintf(" (this member could not join: %v)", te.JoinErr)
		}
		s.event(fmt.Sprintf("Gang barrier timed out after %s: %s%s", te.Timeout, te.Progress(), why),
			map[string]string{"gang_arrived": strconv.Itoa(te.Arrived), "gang_size": strconv.Itoa(te.Size)})
	case errors.As(err, &se):
		s.event(fmt.Sprintf("Gang %s was %s while waiting: %s", se.Gang, se.State, se.Reason), nil)
	case errors.As(err, &le):
		s.event(fmt.Sprintf("Gang barrier failed: %v", le),
			map[string]string{"gang_arrived": strconv.Itoa(le.Arrived), "gang_size": strconv.Itoa(le.Size), "gang_departed": strings.Join(le.Departed, ",")})
	default:
		s.event(fmt.Sprintf("Gang barrier failed: %v", err), nil)
	}
	return s.finish(Exit{ExitCode: 1, Err: err.Error()})
}

// monitorGang heartbeats while the task runs and, when the gang fails or is
// stopped, checkpoints and stops the task (if propagation is on).
func (s *supervisor) monitorGang(client *gang.Client) {
	g := s.spec.Gang
	hb := g.Heartbeat
	if hb <= 0 {
		hb = 5 * time.Second
	}
	ticker := time.NewTicker(hb)
	defer ticker.Stop()
	var index uint64
	warned := false
	for {
		// Block on the gang's status until it changes or the next heartbeat.
		ctx, cancel := context.WithTimeout(context.Background(), hb+10*time.Second)
		var st gang.Status
		var err error
		if index == 0 {
			st, err = client.Heartbeat(ctx, g.ID, g.Member)
		} else {
			st, err = client.GetMember(ctx, g.ID, g.Member, index, hb)
		}
		cancel()
		var apiErr *gang.APIError
		if err != nil && errors.As(err, &apiErr) && apiErr.Code == 404 {
			// The rendezvous server lost the gang (restart, failover):
			// re-register with the ranks already in use.
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = client.Resume(rctx, g.ID, g.Member, g.Join, s.assign)
			rcancel()
			if err == nil {
				s.event(fmt.Sprintf("Rendezvous server had lost gang %s: re-registered as rank %d", g.ID, s.assign.Rank), nil)
				index = 0
				continue
			}
		}
		switch {
		case err != nil && errors.As(err, &apiErr) && apiErr.Code == http.StatusUnauthorized:
			// The identity was refused (expired while the Nomad client
			// could not renew it, say): not a verdict on the gang. Keep
			// running; the renewed identity file is read on the next try.
			if !warned {
				s.event(fmt.Sprintf("Rendezvous server refused this member's workload identity, task keeps running: %v", err), nil)
				warned = true
			}
			select {
			case <-s.childDone:
				return
			case <-ticker.C:
			}
			index = 0
			continue
		case err != nil && errors.As(err, &apiErr) && apiErr.Code/100 == 4:
			st = gang.Status{State: gang.StateFailed, Reason: apiErr.Message}
		case err != nil:
			if !warned {
				s.event(fmt.Sprintf("Rendezvous server unreachable, task keeps running: %v", err), nil)
				warned = true
			}
			select {
			case <-s.childDone:
				return
			case <-ticker.C:
			}
			index = 0
			continue
		default:
			warned = false
			index = st.Index
		}
		if st.State == gang.StateFailed || st.State == gang.StateStopping {
			if g.Propagate {
				s.propagateStop(st)
			}
			return
		}
		select {
		case <-s.childDone:
			return
		case <-ticker.C:
			index = 0 // heartbeat next
		default:
		}
	}
}

// monitorNomad watches the gang's Nomad service: a member whose
// registration disappears has stopped, so this one stops too.
func (s *supervisor) monitorNomad() {
	g := s.spec.Gang
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.childDone
		cancel()
	}()
	reason := s.nomad.NomadWatch(ctx, g.Join.Namespace, g.Service, s.nomadAllocs, max(g.Heartbeat, 100*time.Millisecond))
	if reason != "" && g.Propagate {
		s.propagateStop(gang.Status{State: gang.StateStopping, Reason: reason})
	}
}

// propagateStop sends the checkpoint signal, waits the grace period, then
// the kill signal and finally SIGKILL after the kill timeout.
func (s *supervisor) propagateStop(st gang.Status) {
	g := s.spec.Gang
	s.mu.Lock()
	s.gangStopped = true
	pgid := s.pgid
	s.mu.Unlock()
	msg := fmt.Sprintf("Gang %s is %s (%s): stopping this member", g.ID, st.State, st.Reason)
	// A checkpoint signal delivered less than the grace ago (the impact
	// agent's preemption, through Nomad) is not sent again: the task is in
	// its grace already, and a second one can cut a launcher's shutdown
	// short (torchrun stops waiting for its workers when a second SIGTERM
	// interrupts that wait).
	resend := true
	if at := s.lastCheckpointAt(); !at.IsZero() && s.now().Sub(at) < g.Grace {
		resend = false
	}
	switch {
	case g.CheckpointSignal != "" && resend:
		msg = fmt.Sprintf("Gang %s is %s (%s): sending checkpoint signal %s, stopping in %s", g.ID, st.State, st.Reason, g.CheckpointSignal, g.Grace)
	case g.CheckpointSignal != "":
		msg = fmt.Sprintf("Gang %s is %s (%s): checkpoint signal %s already sent %s ago, stopping in %s", g.ID, st.State, st.Reason,
			g.CheckpointSignal, s.now().Sub(s.lastCheckpointAt()).Round(time.Millisecond), g.Grace)
	}
	s.event(msg, map[string]string{"gang_state": string(st.State)})
	if g.CheckpointSignal != "" {
		if sig, err := ParseSignal(g.CheckpointSignal); err == nil {
			if resend {
				s.sendCheckpoint(pgid, sig)
			}
			if s.waitChild(g.Grace) {
				return
			}
		}
	}
	sig, err := ParseSignal(s.spec.KillSignal)
	if err != nil {
		sig = syscall.SIGINT
	}
	_ = syscall.Kill(-pgid, sig)
	if s.waitChild(s.spec.KillTimeout) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func (s *supervisor) waitChild(d time.Duration) bool { return waitClosed(s.childDone, d) }

func (s *supervisor) reportGangExit(client *gang.Client, req gang.ExitRequest) {
	if client == nil {
		return
	}
	g := s.spec.Gang
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, err := client.Exit(ctx, g.ID, g.Member, req)
		var apiErr *gang.APIError
		if err == nil || errors.As(err, &apiErr) {
			if err != nil {
				s.logger.Warn("reporting exit to the gang", "error", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			s.logger.Warn("could not report exit to the gang", "error", err)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// command builds the task's process: own process group, task env, dir,
// user and log FIFOs. The program is found as Nomad's executor finds it
// (see LookupCommand) and made executable if it is not; a task running as
// another user gets that user's USER, LOGNAME and HOME, as under Nomad's
// executor.
func (s *supervisor) command(env map[string]string) (*exec.Cmd, error) {
	sp := s.spec
	path, err := LookupCommand(sp.Dir, sp.Command, env["PATH"])
	if err != nil {
		return nil, err
	}
	if err := makeExecutable(path); err != nil {
		return nil, err
	}
	cmd := exec.Command(path, sp.Args...)
	cmd.Args[0] = sp.Command
	cmd.Dir = sp.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if sp.User != "" {
		cred, err := Credential(sp.User)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = cred
		env = UserEnv(env, sp.User)
	}
	cmd.Env = envList(env)
	if cmd.Stdout, err = openLog(sp.StdoutPath); err != nil {
		return nil, err
	}
	if cmd.Stderr, err = openLog(sp.StderrPath); err != nil {
		return nil, err
	}
	return cmd, nil
}

// LookupCommand finds a task's program as Nomad's executor does: in the
// task dir's local/, then at the root of the task dir, then (an absolute
// path) on the host, then in PATH (the task env's, pathEnv). It returns an
// absolute path.
func LookupCommand(taskDir, command, pathEnv string) (string, error) {
	for _, p := range []string{filepath.Join(taskDir, "local", command), filepath.Join(taskDir, command)} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if filepath.IsAbs(command) {
		if _, err := os.Stat(command); err != nil {
			return "", fmt.Errorf("command %q: %w", command, err)
		}
		return command, nil
	}
	if !strings.Contains(command, "/") {
		for _, dir := range filepath.SplitList(pathEnv) {
			if dir == "" || !filepath.IsAbs(dir) {
				continue // never the supervisor's working dir
			}
			p := filepath.Join(dir, command)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("command %q not found in %s, %s or PATH %q", command,
		filepath.Join(taskDir, "local"), taskDir, pathEnv)
}

// makeExecutable adds the execute bits (r-x for all, as Nomad's executor)
// to a program that lacks them, so a script fetched by an artifact block
// without its mode runs.
func makeExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("command %s: %w", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o555 != 0o555 && fi.Mode().IsRegular() {
		if err := os.Chmod(path, perm|0o555); err != nil {
			return fmt.Errorf("making %s executable: %w", path, err)
		}
	}
	return nil
}

// UserEnv returns env with USER, LOGNAME and HOME of the named user (the
// task's command and the driver's exec commands).
func UserEnv(env map[string]string, name string) map[string]string {
	u, err := user.Lookup(name)
	if err != nil {
		return env
	}
	out := make(map[string]string, len(env)+3)
	for k, v := range env {
		out[k] = v
	}
	out["USER"], out["LOGNAME"], out["HOME"] = u.Username, u.Username, u.HomeDir
	return out
}

func closeFiles(cmd *exec.Cmd) {
	for _, w := range []any{cmd.Stdout, cmd.Stderr} {
		if f, ok := w.(*os.File); ok {
			f.Close()
		}
	}
}

// openLog opens a log destination (usually a FIFO read by Nomad's logmon)
// for writing; empty means /dev/null. A FIFO is opened read-write: a
// write-only open blocks until a reader has it open, so a logmon that is
// not reading (restarting with its agent, or gone) would hang the
// supervisor before the task starts, deaf to stops. Read-write never
// blocks; the pipe keeps what the task writes (up to its capacity) until
// logmon reads again, and the task gets no EPIPE/SIGPIPE meanwhile.
func openLog(p string) (*os.File, error) {
	if p == "" {
		p = os.DevNull
	}
	flag := os.O_WRONLY | os.O_APPEND | os.O_CREATE
	if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(p, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log %s: %w", p, err)
	}
	return f, nil
}

// Credential is what a process started as the task's user (Nomad's
// task.user) runs with; nil when that is already this process's user.
// The driver's exec commands use it too, so `nomad alloc exec` never
// runs as the plugin's user (root) in a task that runs as another.
func Credential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("task user %q: %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	if os.Geteuid() != 0 {
		if uint64(os.Geteuid()) == uid {
			return nil, nil
		}
		return nil, fmt.Errorf("task user %q: running as another user needs the plugin to run as root", name)
	}
	var groups []uint32
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, nil
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// event appends one task event for the plugin to forward to Nomad.
func (s *supervisor) event(msg string, ann map[string]string) {
	s.logger.Info("event", "message", msg)
	b, _ := jsonMarshal(Event{Time: s.now(), Message: msg, Annotations: ann})
	s.evMu.Lock()
	defer s.evMu.Unlock()
	if _, err := s.events.Write(append(b, '\n')); err != nil {
		s.logger.Error("writing event", "error", err)
	}
}

// finish writes the exit file; it is the supervisor's last act.
func (s *supervisor) finish(ex Exit) int {
	ex.ExitedAt = s.now()
	if err := writeJSONAtomic(s.dir, ExitFile, ex); err != nil {
		s.logger.Error("writing exit file", "error", err)
		return 1
	}
	st := Status{Phase: PhaseExited, SupervisorPID: os.Getpid()}
	_ = writeJSONAtomic(s.dir, StatusFile, st)
	s.logger.Info("task exited", "exit_code", ex.ExitCode, "signal", ex.Signal, "err", ex.Err)
	return 0
}

// ExitStatus turns the error of an exec.Cmd's Wait into an exit code and
// signal, a signal death counting as 128+signal as in a shell; err is
// returned only when the process's end is unknown.
func ExitStatus(waitErr error) (code, signal int, err error) {
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		return 0, 0, nil
	case errors.As(waitErr, &ee):
		ws, ok := ee.Sys().(syscall.WaitStatus)
		if !ok {
			return ee.ExitCode(), 0, nil
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), int(ws.Signal()), nil
		}
		return ws.ExitStatus(), 0, nil
	default:
		return 0, 0, waitErr
	}
}

func sigNum(s os.Signal) int {
	if ss, ok := s.(syscall.Signal); ok {
		return int(ss)
	}
	return 0
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// cgroupName is a file-name-safe, per-start-attempt name for the task's cgroups.
func cgroupName(taskID string) string {
	return strings.NewReplacer("/", ".", " ", "_").Replace(taskID)
}

// rendezvousClient is the member's client of the rendezvous endpoint: at
// URL or found through Consul, over TLS when a CA or client certificate is
// configured, presenting the task's workload identity on every request.
func rendezvousClient(g *GangSpec) (*gang.Client, error) {
	hc := &http.Client{}
	tlsOn := g.CACert != "" || g.ClientCert != ""
	if tlsOn {
		cfg, err := auth.ClientTLS(g.CACert, g.ClientCert, g.ClientKey, "", false)
		if err != nil {
			return nil, fmt.Errorf("rendezvous TLS: %w", err)
		}
		hc.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	var client *gang.Client
	if g.URL != "" {
		c, err := gang.NewClient(g.URL, hc)
		if err != nil {
			return nil, err
		}
		client = c
	} else {
		resolve, err := gang.ConsulResolver(g.ConsulAddr, "", g.ConsulService, g.ConsulTag)
		if err != nil {
			return nil, err
		}
		if tlsOn {
			plain := resolve
			resolve = func(ctx context.Context) (string, error) {
				u, err := plain(ctx)
				return "https://" + strings.TrimPrefix(u, "http://"), err
			}
		}
		client = gang.NewResolvingClient(resolve, hc)
	}
	return client.WithCredential(gang.IdentityCredential{File: g.IdentityFile, Env: g.IdentityToken, Label: "NOMAD_TOKEN_" + gang.IdentityName}), nil
}
