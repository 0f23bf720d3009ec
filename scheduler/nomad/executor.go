package nomad

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// ExecutorConfig tunes the executor.
type ExecutorConfig struct {
	// ParkingPool is where managed jobs wait (default "impact-queue").
	ParkingPool string
	// AdmitDeadline: an admitted job whose allocations are not all running
	// by then is parked again (default 5m).
	AdmitDeadline time.Duration
	// PollInterval while waiting for a preempted job's tasks to exit (1s).
	PollInterval time.Duration
	// Snapshot, when set, gives the executor the model: Apply waits for
	// admitted jobs' allocations to show there (PlacementWait).
	Snapshot func() *cluster.Snapshot
	// BlockedGrace: an admitted job that Nomad still cannot place this
	// long after the admission (a blocked evaluation) is rolled back at
	// once with Nomad's reason, instead of at AdmitDeadline (default 30s;
	// negative: wait for the deadline).
	BlockedGrace time.Duration
	// PlacementWait: after its admissions, Apply waits up to this long (in
	// all, not per job) for the model (Snapshot) to show their
	// allocations, so that the next cycle sees the GPUs taken (the engine
	// also holds them for its admission TTL) (default 2s; negative: do not
	// wait). Needs Snapshot.
	PlacementWait time.Duration
	// Clock (default time.Now).
	Clock func() time.Time
	// OnPreemptionOutcome, when set, is called once per finished
	// preemption with its outcome (OutcomeCompleted, OutcomeRequeued,
	// OutcomeStopped), for metrics. It must not block.
	OnPreemptionOutcome func(outcome string)
}

// ApplyReport says what was done with a plan, for the agent's metrics,
// logs and explanations. Apply fills in everything but RolledBack and
// PinMismatches, which come from CheckDeadlines and PinMismatches (the
// agent's executor adapter adds them).
type ApplyReport struct {
	// Admitted lists the job IDs (cluster.JobKey) re-registered into their
	// target pool.
	Admitted []string
	// Preempted lists the victims whose preemption started (it finishes in
	// the background).
	Preempted []string
	// Requeued lists the incomplete gangs whose whole requeue (stop and
	// park, plan.Requeues) started, in the background like a preemption.
	Requeued []string
	// Reclaimed lists the hung jobs whose reclaim (the idle requeue
	// action) started, in the background like a preemption.
	Reclaimed []string
	// RolledBack lists admissions parked again because the gang did not
	// fully start by its deadline.
	RolledBack []string
	// Skipped maps job IDs to why an action was not taken: SkipConflict or
	// SkipUnderway.
	Skipped map[string]string
	// Failed maps job IDs to errors.
	Failed map[string]error
	// PinMismatches counts the nodes, since the last report, where Nomad
	// allocated other GPUs than an admission pinned.
	PinMismatches int
}

// Why an action of a plan was skipped (ApplyReport.Skipped).
const (
	// SkipConflict: the job changed since the plan was decided (a user
	// update won the EnforceIndex race); the next cycle re-decides.
	SkipConflict = "the job changed since the plan was decided (EnforceIndex conflict); re-deciding"
	// SkipUnderway: an action for the job is already under way.
	SkipUnderway = "an action for the job is already under way"
)

// Executor carries out the engine's plans on Nomad.
type Executor struct {
	c   *Client
	st  *StateStore
	cfg ExecutorConfig
	log hclog.Logger

	mu   sync.Mutex
	busy map[string]bool // jobs with an action under way
	// underway: preemptions being carried out (ordered here or resumed
	// from a previous leader's intent), by victim job.
	underway map[string]*Intent
	pending  map[string]*Intent // admissions waiting to be fully running
	outcomes *bounded[string]   // last rollback/conflict/preemption note per job
	// outcomeCounts counts finished preemptions by outcome.
	outcomeCounts map[string]uint64
	wg            sync.WaitGroup

	// pinMismatches counts nodes where Nomad allocated other GPUs than the
	// admission pinned (checkPins).
	pinMismatches atomic.Uint64

	// crashAt, in tests, makes the executor stop dead at a named step, as
	// if the process had been killed there.
	crashAt string
}

// PinMismatches is how many times, since the start, Nomad allocated an
// admitted job other GPUs on a node than the plan pinned there (metric
// impact_gpu_pin_mismatch_total).
func (x *Executor) PinMismatches() uint64 { return x.pinMismatches.Load() }

// checkPins reads back the GPUs Nomad allocated to a fully started
// admission and compares them, node by node, with the GPUs the admission
// pinned: a difference means the model and Nomad disagree about which
// GPUs are taken, so it is counted and logged naming the job, node and
// GPUs. It reads exactly the allocations admissionState counted as the
// admission's start (started), whatever they became since: an allocation
// that completed or was stopped still holds its AllocatedResources, so a
// job that finished or was stopped meanwhile is no mismatch. Reading the
// job's live allocations instead counted one whenever a job was stopped
// (or its tasks exited) before the check ran, seen once on a real Nomad.
func (x *Executor) checkPins(ctx context.Context, in *Intent, started []string) {
	if len(in.PinnedGPUs) == 0 || len(started) == 0 {
		return
	}
	got, err := x.allocatedGPUs(ctx, in.JobID, started)
	if err != nil {
		x.log.Debug("cannot read back the GPUs of an admission", "job", in.JobID, "error", err)
		return
	}
	nodes := make([]string, 0, len(in.PinnedGPUs))
	for n := range in.PinnedGPUs {
		nodes = append(nodes, n)
	}
	for n := range got {
		if _, ok := in.PinnedGPUs[n]; !ok {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		want := slices.Clone(in.PinnedGPUs[n])
		have := slices.Clone(got[n])
		slices.Sort(want)
		slices.Sort(have)
		if slices.Equal(want, have) {
			continue
		}
		x.pinMismatches.Add(1)
		x.log.Warn("Nomad allocated other GPUs than the admission pinned", "job", in.JobID, "node", n,
			"pinned", strings.Join(want, ","), "allocated", strings.Join(have, ","))
	}
}

// allocatedGPUs reads the GPU instance IDs Nomad gave the allocations
// (every task's gpu devices in AllocatedResources), by node.
func (x *Executor) allocatedGPUs(ctx context.Context, jobID string, allocs []string) (map[string][]string, error) {
	ns, _ := splitJobKey(jobID)
	got := map[string][]string{}
	for _, id := range allocs {
		a, _, err := x.c.api.Allocations().Info(id, x.c.qns(ctx, ns))
		if err != nil {
			return nil, fmt.Errorf("read allocation %s: %w", id, err)
		}
		if a.AllocatedResources == nil {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			if tr == nil {
				continue
			}
			for _, d := range tr.Devices {
				if d != nil && d.Type == "gpu" {
					got[a.NodeID] = append(got[a.NodeID], d.DeviceIDs...)
				}
			}
		}
	}
	return got, nil
}

var errCrashed = errors.New("executor stopped at a test crash point")

// NewExecutor builds an executor.
func NewExecutor(c *Client, st *StateStore, cfg ExecutorConfig, logger hclog.Logger) *Executor {
	if cfg.ParkingPool == "" {
		cfg.ParkingPool = "impact-queue"
	}
	if cfg.AdmitDeadline <= 0 {
		cfg.AdmitDeadline = 5 * time.Minute
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.PlacementWait == 0 {
		cfg.PlacementWait = 2 * time.Second
	}
	if cfg.BlockedGrace == 0 {
		cfg.BlockedGrace = 30 * time.Second
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Executor{
		c: c, st: st, cfg: cfg, log: logger.Named("executor"),
		busy: map[string]bool{}, pending: map[string]*Intent{}, underway: map[string]*Intent{}, outcomes: newBounded[string](maxOutcomes),
	}
}

func (x *Executor) crash(step string) error {
	if x.crashAt == step {
		return errCrashed
	}
	return nil
}

func (x *Executor) claim(jobID string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.busy[jobID] || x.pending[jobID] != nil {
		return false
	}
	x.busy[jobID] = true
	return true
}

func (x *Executor) release(jobID string) {
	x.mu.Lock()
	delete(x.busy, jobID)
	delete(x.underway, jobID)
	x.mu.Unlock()
}

// runPreemption carries out a claimed preemption in the background.
func (x *Executor) runPreemption(ctx context.Context, in *Intent, what string) {
	x.mu.Lock()
	x.underway[in.JobID] = in
	x.mu.Unlock()
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		defer x.release(in.JobID)
		// ctx is the leader's: losing leadership stops the preemption
		// where it is, and its intent lets the next leader finish it.
		if err := x.preempt(ctx, in); err != nil {
			x.log.Error(what+" interrupted; the intent stays for recovery", "job", in.JobID, "error", err)
		}
	}()
}

// PreemptionsUnderway lists the preemptions being carried out, by victim:
// its allocations, grace and preemptor (a new leader's engine is told of
// them after Recover).
func (x *Executor) PreemptionsUnderway() []engine.Preemption {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]engine.Preemption, 0, len(x.underway))
	for _, in := range x.underway {
		out = append(out, engine.Preemption{JobID: in.JobID, Allocs: append([]string(nil), in.Allocs...), GPUs: in.GPUs,
			Grace: in.Grace, CheckpointSignal: in.Signal, Preemptor: in.Preemptor, Reason: in.Reason, RequeueExitCode: in.RequeueExitCode})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].JobID < out[j].JobID })
	return out
}

func (x *Executor) setOutcome(jobID, s string) {
	x.mu.Lock()
	x.outcomes.set(jobID, s)
	x.mu.Unlock()
}

// Wait blocks until background preemptions end.
func (x *Executor) Wait() { x.wg.Wait() }

// Apply carries out a plan: admissions now, preemptions in the background
// (signal, grace, re-park, stop). An action already under way for a job is
// not started twice.
func (x *Executor) Apply(ctx context.Context, plan *engine.Plan) ApplyReport {
	res := ApplyReport{Skipped: map[string]string{}, Failed: map[string]error{}}
	if plan == nil {
		return res
	}
	for _, p := range plan.Preemptions {
		if !x.claim(p.JobID) {
			res.Skipped[p.JobID] = SkipUnderway
			continue
		}
		in := &Intent{
			Kind: IntentPreempt, JobID: p.JobID, Phase: PhaseDecided, Allocs: p.Allocs,
			Signal: p.CheckpointSignal, Grace: p.Grace, Preemptor: p.Preemptor, Reason: p.Reason,
			GPUs: p.GPUs, LostGPUH: p.LostGPUHours, RequeueExitCode: p.RequeueExitCode, Created: x.cfg.Clock(),
		}
		if err := x.st.PutIntent(ctx, in); err != nil {
			x.release(p.JobID)
			res.Failed[p.JobID] = fmt.Errorf("record preemption intent: %w", err)
			continue
		}
		res.Preempted = append(res.Preempted, p.JobID)
		x.runPreemption(ctx, in, "preemption")
	}
	for _, r := range plan.Requeues {
		if !x.claim(r.JobID) {
			res.Skipped[r.JobID] = SkipUnderway
			continue
		}
		in := &Intent{
			Kind: IntentPreempt, JobID: r.JobID, Phase: PhaseDecided, Allocs: r.Allocs,
			Signal: r.CheckpointSignal, Grace: r.Grace, Reason: r.Reason, GPUs: r.GPUs,
			RequeueExitCode: r.RequeueExitCode, Created: x.cfg.Clock(),
		}
		if err := x.st.PutIntent(ctx, in); err != nil {
			x.release(r.JobID)
			res.Failed[r.JobID] = fmt.Errorf("record requeue intent: %w", err)
			continue
		}
		res.Requeued = append(res.Requeued, r.JobID)
		x.runPreemption(ctx, in, "requeue of an incomplete gang")
	}
	x.applyReclaims(ctx, plan, &res)
	var admitted []engine.Admission
	for _, a := range plan.Admissions {
		if !x.claim(a.JobID) {
			res.Skipped[a.JobID] = SkipUnderway
			continue
		}
		err := x.admit(ctx, a)
		x.release(a.JobID)
		switch {
		case err == nil:
			res.Admitted = append(res.Admitted, a.JobID)
			admitted = append(admitted, a)
		case errors.Is(err, ErrConflict):
			res.Skipped[a.JobID] = SkipConflict
			x.setOutcome(a.JobID, err.Error())
		default:
			res.Failed[a.JobID] = err
		}
	}
	x.awaitPlacement(ctx, admitted)
	return res
}

// admit re-registers a parked job into its target pool, pinned to the
// plan's nodes, enforcing the JobModifyIndex the plan was decided on.
func (x *Executor) admit(ctx context.Context, a engine.Admission) error {
	if a.Pool == "" {
		// The engine resolves the pool (impact_pool, else its default,
		// else the placed nodes' pool); the executor never guesses one.
		return fmt.Errorf("admit %s: the plan names no target pool", a.JobID)
	}
	ns, id := splitJobKey(a.JobID)
	pins := map[string][]string{}
	for _, g := range a.Groups {
		pins[g.Group] = g.Nodes()
	}
	in := &Intent{
		Kind: IntentAdmit, JobID: a.JobID, Phase: PhaseDecided, FromIndex: a.ModifyIndex,
		Pool: a.Pool, Pins: pins, PinnedGPUs: plannedGPUs(a), Deadline: x.cfg.Clock().Add(x.cfg.AdmitDeadline), Created: x.cfg.Clock(),
	}
	if err := x.st.PutIntent(ctx, in); err != nil {
		return fmt.Errorf("admit %s: record intent: %w", a.JobID, err)
	}
	if err := x.crash("admit:after-intent"); err != nil {
		return err
	}
	job, _, err := x.c.api.Jobs().Info(id, x.c.qns(ctx, ns))
	if err != nil {
		_ = x.st.DeleteIntent(ctx, a.JobID)
		return fmt.Errorf("admit %s: read job: %w", a.JobID, err)
	}
	if derefU(job.JobModifyIndex) != a.ModifyIndex || deref(job.NodePool) != x.cfg.ParkingPool || derefB(job.Stop) {
		_ = x.st.DeleteIntent(ctx, a.JobID)
		return fmt.Errorf("admit %s: job changed since the plan (modify index %d, plan %d, pool %q): %w",
			a.JobID, derefU(job.JobModifyIndex), a.ModifyIndex, deref(job.NodePool), ErrConflict)
	}
	if err := x.pinJob(job, a); err != nil {
		_ = x.st.DeleteIntent(ctx, a.JobID)
		return fmt.Errorf("admit %s: %w", a.JobID, err)
	}
	resp, _, err := x.c.api.Jobs().EnforceRegister(job, a.ModifyIndex, x.c.wns(ctx, ns))
	if err != nil {
		if isEnforceConflict(err) {
			_ = x.st.DeleteIntent(ctx, a.JobID)
			return fmt.Errorf("admit %s: %s: %w", a.JobID, strings.TrimSpace(err.Error()), ErrConflict)
		}
		// The register may or may not have happened: look (a few
		// times: the error may be a passing one).
		var cur *api.Job
		var rerr error
		for attempt := range 3 {
			if cur, _, rerr = x.c.api.Jobs().Info(id, x.c.qns(ctx, ns)); rerr == nil || ctx.Err() != nil {
				break
			}
			_ = sleepCtx(ctx, time.Duration(attempt+1)*100*time.Millisecond)
		}
		if rerr != nil {
			// Unknown: watch the job as if admitted, so that a gang
			// that did get placed is still held to the deadline (and
			// rolled back) and not left half-placed. CheckDeadlines
			// settles it: a job still parked needs nothing.
			x.mu.Lock()
			x.pending[a.JobID] = in
			x.mu.Unlock()
			return fmt.Errorf("admit %s: register: %w (outcome unknown, reading the job back failed: %v; watching it until the admission deadline)", a.JobID, err, rerr)
		}
		if derefU(cur.JobModifyIndex) == a.ModifyIndex {
			_ = x.st.DeleteIntent(ctx, a.JobID)
			return fmt.Errorf("admit %s: register: %w", a.JobID, err)
		}
		resp = &api.JobRegisterResponse{JobModifyIndex: derefU(cur.JobModifyIndex)}
	}
	if err := x.crash("admit:after-register"); err != nil {
		return err
	}
	in.Phase = PhaseRegistered
	in.ToIndex = resp.JobModifyIndex
	if err := x.st.PutIntent(ctx, in); err != nil {
		// The job is admitted; the intent (phase decided) is still there,
		// and Recover adopts a registered job, so only log.
		x.log.Warn("admitted, but the intent update failed", "job", a.JobID, "error", err)
	}
	x.mu.Lock()
	x.pending[a.JobID] = in
	x.outcomes.del(a.JobID)
	x.mu.Unlock()
	x.log.Info("admitted", "job", a.JobID, "pool", a.Pool, "pins", pins, "gpus", in.PinnedGPUs, "modify_index", resp.JobModifyIndex)
	for _, w := range a.Warnings {
		x.log.Warn("admitted a task that will not see all its GPUs", "job", a.JobID, "warning", w)
	}
	return nil
}

// plannedGPUs is the plan's GPUs of an admission by node (each group's
// union there, all groups together), as the intent records them for the
// read-back (checkPins).
func plannedGPUs(a engine.Admission) map[string][]string {
	out := map[string][]string{}
	for _, g := range a.Groups {
		for _, ap := range g.Allocs {
			out[ap.NodeID] = append(out[ap.NodeID], ap.GPUs...)
		}
	}
	for n, ids := range out {
		slices.Sort(ids)
		out[n] = slices.Compact(ids)
	}
	return out
}

// awaitPlacement waits, PlacementWait at most in all, until the model
// shows the allocations of the admitted jobs: until then their GPUs look
// free to the model.
func (x *Executor) awaitPlacement(ctx context.Context, admitted []engine.Admission) {
	if x.cfg.Snapshot == nil || x.cfg.PlacementWait < 0 || len(admitted) == 0 {
		return
	}
	deadline := time.Now().Add(x.cfg.PlacementWait)
	for {
		snap := x.cfg.Snapshot()
		waiting := 0
		for _, a := range admitted {
			want := 0
			for _, g := range a.Groups {
				want += len(g.Allocs)
			}
			if len(snap.JobAllocs(a.JobID)) < want {
				waiting++
			}
		}
		if waiting == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			x.log.Debug("admitted jobs' allocations not all in the model yet", "waiting", waiting)
			return
		}
		_ = sleepCtx(ctx, 2*time.Millisecond)
	}
}

// pinJob rewrites a job for admission: target pool, a set_contains_any
// pin per placed group (distinct_hosts when each allocation has a node of
// its own), and in each GPU device block of the group's tasks a pin of the
// exact GPUs the plan gave that block (ownDevicePin): the union over the
// group's allocations, since Nomad applies a device constraint to every
// allocation of the group alike (placement keeps that union exact).
func (x *Executor) pinJob(job *api.Job, a engine.Admission) error {
	pool := a.Pool
	job.NodePool = &pool
	byName := map[string]*api.TaskGroup{}
	for _, tg := range job.TaskGroups {
		byName[deref(tg.Name)] = tg
		unpinGroup(tg)
	}
	for _, g := range a.Groups {
		tg := byName[g.Group]
		if tg == nil {
			return fmt.Errorf("plan places group %q, which the job does not have", g.Group)
		}
		nodes := g.Nodes()
		if len(nodes) == 0 {
			continue
		}
		tg.Constraints = append(tg.Constraints, &api.Constraint{LTarget: PinTarget, RTarget: strings.Join(nodes, ","), Operand: "set_contains_any"})
		if len(nodes) > 1 && len(nodes) == len(g.Allocs) {
			tg.Constraints = append(tg.Constraints, ownDistinctHosts())
		}
		if err := pinDevices(tg, g); err != nil {
			return fmt.Errorf("group %q: %w", g.Group, err)
		}
	}
	return nil
}

// pinDevices adds to each GPU device block of the group's tasks the pin of
// its planned GPUs. Which block gets which GPUs is the plan's: a plan
// without per-block GPUs (AllocPlacement.Blocks) is taken only for a
// group of exactly one GPU block, whose GPUs are then the allocations';
// a plan that leaves a block without GPUs, or several blocks unsplit, is
// refused rather than letting Nomad choose.
func pinDevices(tg *api.TaskGroup, g engine.GroupPlacement) error {
	type key struct {
		task  string
		index int
	}
	blocks := map[key][]string{}
	split := false
	var all []string
	for _, ap := range g.Allocs {
		all = append(all, ap.GPUs...)
		for _, b := range ap.Blocks {
			split = true
			k := key{b.Task, b.Index}
			blocks[k] = append(blocks[k], b.GPUs...)
		}
	}
	var gpuBlocks []*api.RequestedDevice
	var keys []key
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for bi, d := range t.Resources.Devices {
			if isGPURequest(d.Name) {
				gpuBlocks = append(gpuBlocks, d)
				keys = append(keys, key{t.Name, bi})
			}
		}
	}
	if !split && len(gpuBlocks) > 1 {
		return fmt.Errorf("the plan does not split the group's GPUs among its %d GPU device blocks", len(gpuBlocks))
	}
	if !split && len(gpuBlocks) == 1 {
		blocks[keys[0]] = all
	}
	for i, d := range gpuBlocks {
		ids := blocks[keys[i]]
		if len(ids) == 0 {
			return fmt.Errorf("the plan gives no GPUs to device block %d (%s) of task %q", keys[i].index, d.Name, keys[i].task)
		}
		slices.Sort(ids)
		d.Constraints = append(d.Constraints, ownDevicePin(slices.Compact(ids)))
	}
	return nil
}

// ownDevicePin is the constraint an admission adds inside a device block:
// the instance IDs as its LTarget and ${device.ids} as its RTarget. Nomad
// reads a ${device.ids} constraint from either side alike (the device
// group must hold one of the IDs; each instance given must be one of
// them), so it allocates exactly those instances; the mirrored form is
// how unpinning tells it from a ${device.ids} constraint the user wrote,
// which has the attribute on the left (as Nomad's docs write it).
func ownDevicePin(ids []string) *api.Constraint {
	return &api.Constraint{LTarget: strings.Join(ids, ","), Operand: "set_contains_any", RTarget: DeviceIDsTarget}
}

// isOwnDevicePin reports whether a device constraint is ownDevicePin's.
func isOwnDevicePin(l, op, r string) bool {
	return op == "set_contains_any" && r == DeviceIDsTarget && l != "" && !strings.HasPrefix(l, "${")
}

// ownDistinctHosts is the distinct_hosts constraint an admission adds. It
// carries PinTarget as its LTarget, which Nomad's distinct_hosts check
// ignores (it reads only the operand and RTarget), so that withoutPins can
// tell it from a distinct_hosts the user wrote, whose LTarget is empty.
func ownDistinctHosts() *api.Constraint {
	return &api.Constraint{LTarget: PinTarget, Operand: "distinct_hosts", RTarget: "true"}
}

// withoutPins drops the constraints an admission added (the node pin and
// our own distinct_hosts) and keeps every constraint of the user's, so a
// job parked again is the job its user submitted.
func withoutPins(cs []*api.Constraint) []*api.Constraint {
	out := cs[:0:0]
	for _, c := range cs {
		if c.LTarget == PinTarget && (c.Operand == "set_contains_any" || c.Operand == "distinct_hosts") {
			continue
		}
		out = append(out, c)
	}
	return out
}

func withoutDevicePins(cs []*api.Constraint) []*api.Constraint {
	out := cs[:0:0]
	for _, c := range cs {
		if isOwnDevicePin(c.LTarget, c.Operand, c.RTarget) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// unpinGroup removes from a task group what an admission added: the node
// pin, our distinct_hosts and the device pins; the user's own constraints
// stay.
func unpinGroup(tg *api.TaskGroup) {
	tg.Constraints = withoutPins(tg.Constraints)
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if len(d.Constraints) > 0 {
				d.Constraints = withoutDevicePins(d.Constraints)
			}
		}
	}
}

// unpin turns an admitted job back into a parked one.
func (x *Executor) unpin(job *api.Job) {
	pool := x.cfg.ParkingPool
	job.NodePool = &pool
	for _, tg := range job.TaskGroups {
		unpinGroup(tg)
	}
}

// park re-registers the job into the parking pool without pins, retrying
// when a concurrent update moves the JobModifyIndex. A job already parked
// (e.g. re-submitted by its user) is left alone.
func (x *Executor) park(ctx context.Context, jobID string) error {
	ns, id := splitJobKey(jobID)
	for attempt := 0; attempt < 5; attempt++ {
		job, _, err := x.c.api.Jobs().Info(id, x.c.qns(ctx, ns))
		if err != nil {
			if isNotFound(err) {
				return nil
			}
			return fmt.Errorf("park %s: read job: %w", jobID, err)
		}
		if derefB(job.Stop) {
			return nil
		}
		if deref(job.NodePool) == x.cfg.ParkingPool && !pinnedAPI(job) {
			return nil
		}
		idx := derefU(job.JobModifyIndex)
		x.unpin(job)
		_, _, err = x.c.api.Jobs().EnforceRegister(job, idx, x.c.wns(ctx, ns))
		if err == nil {
			return nil
		}
		if !isEnforceConflict(err) {
			return fmt.Errorf("park %s: register: %w", jobID, err)
		}
		x.log.Info("job changed while parking it; re-reading", "job", jobID)
	}
	return fmt.Errorf("park %s: %w (5 attempts)", jobID, ErrConflict)
}

func pinnedAPI(job *api.Job) bool {
	for _, tg := range job.TaskGroups {
		for _, c := range tg.Constraints {
			if c.LTarget == PinTarget && c.Operand == "set_contains_any" {
				return true
			}
		}
	}
	return false
}

// liveAllocs lists the job's allocations that are not terminal.
func (x *Executor) liveAllocs(ctx context.Context, jobID string) ([]*api.AllocationListStub, error) {
	ns, id := splitJobKey(jobID)
	as, _, err := x.c.api.Jobs().Allocations(id, true, x.c.qns(ctx, ns))
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list allocations of %s: %w", jobID, err)
	}
	var out []*api.AllocationListStub
	for _, a := range as {
		if !terminalStatus(a.ClientStatus) {
			out = append(out, a)
		}
	}
	return out, nil
}

// stopAll stops the job's live allocations (re-registering does not stop
// running batch allocations; see DESIGN.md).
func (x *Executor) stopAll(ctx context.Context, jobID string) error {
	ns, _ := splitJobKey(jobID)
	live, err := x.liveAllocs(ctx, jobID)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range live {
		if a.DesiredStatus != "run" {
			continue
		}
		if _, err := x.c.api.Allocations().Stop(&api.Allocation{ID: a.ID}, x.c.qns(ctx, ns)); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("stop allocation %s of %s: %w", a.ID, jobID, err))
		}
	}
	return errors.Join(errs...)
}

// preempt runs (or resumes, after a leader change) one preemption:
// checkpoint signal, grace (or until the tasks exit), re-park, stop.
func (x *Executor) preempt(ctx context.Context, in *Intent) error {
	ns, _ := splitJobKey(in.JobID)
	if in.Phase == PhaseDecided {
		if in.Signal != "" {
			live, err := x.liveAllocs(ctx, in.JobID)
			if err != nil {
				return err
			}
			for _, a := range live {
				if a.ClientStatus != "running" {
					continue
				}
				if err := x.c.api.Allocations().Signal(&api.Allocation{ID: a.ID}, x.c.qns(ctx, ns), "", in.Signal); err != nil {
					x.log.Warn("checkpoint signal failed", "job", in.JobID, "alloc", a.ID, "signal", in.Signal, "error", err)
				}
			}
		}
		in.Phase = PhaseSignalled
		in.SignalledAt = x.cfg.Clock()
		if err := x.st.PutIntent(ctx, in); err != nil {
			return fmt.Errorf("preempt %s: update intent: %w", in.JobID, err)
		}
		if err := x.crash("preempt:after-signal"); err != nil {
			return err
		}
	}
	if in.Phase == PhaseSignalled {
		if in.Signal != "" && in.Grace > 0 {
			deadline := in.SignalledAt.Add(in.Grace)
			for x.cfg.Clock().Before(deadline) {
				if out, err := x.victimOutcome(ctx, in); err == nil && out.ended {
					break
				}
				wait := min(x.cfg.PollInterval, deadline.Sub(x.cfg.Clock()))
				if err := sleepCtx(ctx, max(wait, time.Millisecond)); err != nil {
					return err
				}
			}
		}
		// The outcome contract (package doc): every task exited 0 -> the
		// work is done; it is neither parked nor stopped, and Nomad marks
		// the job complete. Anything else is requeued.
		out, err := x.victimOutcome(ctx, in)
		if err != nil {
			return fmt.Errorf("preempt %s: %w", in.JobID, err)
		}
		if out.done {
			if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
				return err
			}
			if in.Preemptor == "" {
				x.setOutcome(in.JobID, "finished before its requeue (every task exited 0): complete, not requeued")
				return nil
			}
			x.countOutcome(OutcomeCompleted)
			x.setOutcome(in.JobID, fmt.Sprintf("finished during its preemption grace (every task exited 0): complete, not requeued (preempted for %s)", in.Preemptor))
			x.log.Info("preempted job finished within its grace; not requeued", "job", in.JobID, "for", in.Preemptor)
			return nil
		}
		in.outcome = OutcomeStopped
		if out.requeued {
			in.outcome = OutcomeRequeued
		}
		if in.Idle == IdleStop {
			err = x.stopForGood(ctx, in)
		} else {
			err = x.park(ctx, in.JobID)
		}
		if err != nil {
			return err
		}
		in.Phase = PhaseParked
		if err := x.st.PutIntent(ctx, in); err != nil {
			return fmt.Errorf("preempt %s: update intent: %w", in.JobID, err)
		}
		if err := x.crash("preempt:after-park"); err != nil {
			return err
		}
	}
	if err := x.stopAll(ctx, in.JobID); err != nil {
		return err
	}
	if in.Idle != "" {
		return x.finishReclaim(ctx, in)
	}
	if in.Preemptor != "" {
		if err := x.st.RecordPreemption(ctx, PreemptionRecord{
			JobID: in.JobID, Preemptor: in.Preemptor, At: x.cfg.Clock(), GPUs: in.GPUs,
			LostGPUHours: in.LostGPUH, Reason: in.Reason,
		}); err != nil {
			x.log.Warn("could not record the preemption", "job", in.JobID, "error", err)
		}
	}
	if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
		return err
	}
	how := "stopped at the end of its grace and requeued"
	switch in.outcome {
	case OutcomeRequeued:
		how = fmt.Sprintf("exited with its requeue code %d and was requeued", requeueCode(in))
	case "":
		// Resumed after the park: how the tasks ended is not known.
		how = "requeued"
		in.outcome = OutcomeStopped
	}
	if in.Preemptor == "" {
		x.setOutcome(in.JobID, fmt.Sprintf("requeued whole (%s): %s", how, in.Reason))
		x.log.Info("incomplete gang requeued whole", "job", in.JobID, "outcome", in.outcome)
		return nil
	}
	x.countOutcome(in.outcome)
	x.setOutcome(in.JobID, fmt.Sprintf("preempted for %s, %s: %s", in.Preemptor, how, in.Reason))
	x.log.Info("preempted", "job", in.JobID, "for", in.Preemptor, "gpus", in.GPUs, "outcome", in.outcome)
	return nil
}

// Preemption outcomes, by how the victim's tasks ended (see the package
// documentation).
const (
	// OutcomeCompleted: every task exited 0 before the stop; the job is
	// done and not requeued.
	OutcomeCompleted = "completed"
	// OutcomeRequeued: a task exited with the job's requeue exit code; the
	// job was parked and its allocations stopped at once.
	OutcomeRequeued = "requeued"
	// OutcomeStopped: the tasks were still running at the end of the grace
	// (or no signal was sent); they were stopped and the job parked.
	OutcomeStopped = "stopped"
)

// PreemptionOutcomes counts finished preemptions by outcome.
func (x *Executor) PreemptionOutcomes() map[string]uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make(map[string]uint64, len(x.outcomeCounts))
	for k, v := range x.outcomeCounts {
		out[k] = v
	}
	return out
}

func (x *Executor) countOutcome(o string) {
	x.mu.Lock()
	if x.outcomeCounts == nil {
		x.outcomeCounts = map[string]uint64{}
	}
	x.outcomeCounts[o]++
	x.mu.Unlock()
	if x.cfg.OnPreemptionOutcome != nil {
		x.cfg.OnPreemptionOutcome(o)
	}
}

func requeueCode(in *Intent) int {
	if in.RequeueExitCode != 0 {
		return in.RequeueExitCode
	}
	return policy.DefaultRequeueExitCode
}

// victimOutcome is how a preempted job's allocations (those the plan
// named) stand: ended when each has finished or has a task that exited
// with the requeue code since the preemption was decided; done when each
// completed on its own (client status complete with desired status run:
// every task exited 0, not stopped by the server); requeued when some task
// exited with the requeue code. Allocations Nomad no longer lists count as
// ended, not done.
type outcome struct{ ended, done, requeued bool }

func (x *Executor) victimOutcome(ctx context.Context, in *Intent) (outcome, error) {
	ns, id := splitJobKey(in.JobID)
	as, _, err := x.c.api.Jobs().Allocations(id, true, x.c.qns(ctx, ns))
	if err != nil {
		if isNotFound(err) {
			return outcome{ended: true}, nil
		}
		return outcome{}, fmt.Errorf("list allocations of %s: %w", in.JobID, err)
	}
	byID := make(map[string]*api.AllocationListStub, len(as))
	for _, a := range as {
		byID[a.ID] = a
	}
	ids := in.Allocs
	if len(ids) == 0 {
		for _, a := range as {
			ids = append(ids, a.ID)
		}
	}
	code := strconv.Itoa(requeueCode(in))
	since := in.Created.UnixNano()
	o := outcome{ended: true, done: len(ids) > 0}
	for _, aid := range ids {
		a := byID[aid]
		if a == nil {
			o.done = false
			continue
		}
		if a.ClientStatus == "complete" && a.DesiredStatus == "run" {
			continue
		}
		o.done = false
		if terminalStatus(a.ClientStatus) {
			continue
		}
		if exitedWith(a, code, since) {
			o.requeued = true
			continue
		}
		o.ended = false
	}
	return o, nil
}

// exitedWith reports whether a task of the allocation terminated with the
// exit code at or after since (Nomad's Terminated task event carries it in
// Details["exit_code"]).
func exitedWith(a *api.AllocationListStub, code string, since int64) bool {
	for _, ts := range a.TaskStates {
		if ts == nil {
			continue
		}
		for _, ev := range ts.Events {
			if ev != nil && ev.Type == "Terminated" && ev.Time >= since && ev.Details["exit_code"] == code {
				return true
			}
		}
	}
	return false
}

// Recover finishes or undoes what a previous leader left half-done. Call
// it when this agent becomes leader, before applying plans:
//   - an admission recorded but not registered is dropped (the job is
//     still parked and the next plan decides again);
//   - an admission registered (the job carries our pins) is adopted, and
//     its deadline watched;
//   - a preemption is carried on from its last phase to the end.
func (x *Executor) Recover(ctx context.Context) error {
	intents, err := x.st.Intents(ctx)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, in := range intents {
		switch in.Kind {
		case IntentAdmit:
			if err := x.recoverAdmit(ctx, in); err != nil {
				errs = append(errs, err)
			}
		case IntentPreempt:
			if !x.claim(in.JobID) {
				continue
			}
			x.log.Info("resuming preemption left by a previous leader", "job", in.JobID, "phase", in.Phase)
			x.runPreemption(ctx, in, "resumed preemption")
		}
	}
	return errors.Join(errs...)
}

func (x *Executor) recoverAdmit(ctx context.Context, in *Intent) error {
	ns, id := splitJobKey(in.JobID)
	job, _, err := x.c.api.Jobs().Info(id, x.c.qns(ctx, ns))
	if err != nil {
		if isNotFound(err) {
			return x.st.DeleteIntent(ctx, in.JobID)
		}
		return fmt.Errorf("recover admission of %s: read job: %w", in.JobID, err)
	}
	registered := pinnedAPI(job) && deref(job.NodePool) != x.cfg.ParkingPool && derefU(job.JobModifyIndex) != in.FromIndex
	if !registered {
		x.log.Info("dropping an admission that never reached Nomad", "job", in.JobID)
		return x.st.DeleteIntent(ctx, in.JobID)
	}
	if in.Phase != PhaseRegistered {
		in.Phase = PhaseRegistered
		in.ToIndex = derefU(job.JobModifyIndex)
		if err := x.st.PutIntent(ctx, in); err != nil {
			return fmt.Errorf("recover admission of %s: %w", in.JobID, err)
		}
	}
	x.log.Info("adopting an admission made by a previous leader", "job", in.JobID, "deadline", in.Deadline)
	x.mu.Lock()
	x.pending[in.JobID] = in
	x.mu.Unlock()
	return nil
}

// CheckDeadlines looks at admissions waiting to run: those whose every
// group has its allocations running (or already complete) are done; those
// past their deadline, or with a failed allocation, are rolled back (the
// job is parked again and its allocations stopped), so a gang never stays
// half-placed. It returns the jobs rolled back.
func (x *Executor) CheckDeadlines(ctx context.Context) []string {
	x.mu.Lock()
	pend := make([]*Intent, 0, len(x.pending))
	for _, in := range x.pending {
		pend = append(pend, in)
	}
	x.mu.Unlock()
	sort.Slice(pend, func(i, j int) bool { return pend[i].JobID < pend[j].JobID })
	var rolled []string
	for _, in := range pend {
		st, err := x.admissionState(ctx, in)
		if err != nil {
			x.log.Warn("cannot check admission", "job", in.JobID, "error", err)
			continue
		}
		failed := st.failed
		switch {
		case st.done:
			x.checkPins(ctx, in, st.started)
			if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
				x.log.Warn("cannot delete a finished admission intent", "job", in.JobID, "error", err)
				continue
			}
			x.mu.Lock()
			delete(x.pending, in.JobID)
			x.mu.Unlock()
		case failed != "" || x.cfg.Clock().After(in.Deadline):
			reason := failed
			if reason == "" {
				reason = fmt.Sprintf("not all allocations running within %v", x.cfg.AdmitDeadline)
			}
			if err := x.rollback(ctx, in, reason); err != nil {
				x.log.Error("rollback failed; will retry", "job", in.JobID, "error", err)
				continue
			}
			rolled = append(rolled, in.JobID)
		}
	}
	return rolled
}

// admissionCheck is how an admitted job stands (admissionState).
type admissionCheck struct {
	// done: nothing left to watch. Either every group has its allocations
	// of the admitted version running or finished (started lists them,
	// for the read-back of their GPUs), or the job is gone, stopped or
	// parked again by someone else (started is empty: nothing to check).
	done    bool
	started []string
	// failed says why the admission failed ("" while it may still start).
	failed string
}

// admissionState says whether every group of an admitted job has its
// allocations of the admitted version running (or finished), or why it
// failed.
func (x *Executor) admissionState(ctx context.Context, in *Intent) (admissionCheck, error) {
	ns, id := splitJobKey(in.JobID)
	job, _, err := x.c.api.Jobs().Info(id, x.c.qns(ctx, ns))
	if err != nil {
		if isNotFound(err) {
			return admissionCheck{done: true}, nil
		}
		return admissionCheck{}, err
	}
	if derefB(job.Stop) || (deref(job.NodePool) == x.cfg.ParkingPool && !pinnedAPI(job)) {
		// Stopped or re-parked by someone else: nothing to watch.
		return admissionCheck{done: true}, nil
	}
	as, _, err := x.c.api.Jobs().Allocations(id, true, x.c.qns(ctx, ns))
	if err != nil {
		return admissionCheck{}, err
	}
	version := derefU(job.Version)
	count := map[string]int{}
	var started []string
	for _, a := range as {
		if a.JobVersion < version {
			continue
		}
		switch a.ClientStatus {
		case "running", "complete":
			count[a.TaskGroup]++
			started = append(started, a.ID)
		case "failed", "lost":
			return admissionCheck{failed: fmt.Sprintf("allocation %s of group %s %s", a.ID, a.TaskGroup, a.ClientStatus)}, nil
		}
	}
	for _, tg := range job.TaskGroups {
		if count[deref(tg.Name)] < derefI(tg.Count) {
			return admissionCheck{failed: x.blockedReason(ctx, in, job)}, nil
		}
	}
	return admissionCheck{done: true, started: started}, nil
}

// blockedReason says why Nomad could not place an admitted job, once it
// has had BlockedGrace to do so: a blocked evaluation of the admitted
// version names the groups and what stopped them. "" while there is
// none (or the grace has not passed: capacity may be freeing up).
func (x *Executor) blockedReason(ctx context.Context, in *Intent, job *api.Job) string {
	if x.cfg.BlockedGrace < 0 || x.cfg.Clock().Sub(in.Created) < x.cfg.BlockedGrace {
		return ""
	}
	ns, id := splitJobKey(in.JobID)
	evals, _, err := x.c.api.Jobs().Evaluations(id, x.c.qns(ctx, ns))
	if err != nil {
		return ""
	}
	for _, e := range evals {
		if e.Status != "blocked" || e.JobModifyIndex < derefU(job.JobModifyIndex) || len(e.FailedTGAllocs) == 0 {
			continue
		}
		groups := make([]string, 0, len(e.FailedTGAllocs))
		for g := range e.FailedTGAllocs {
			groups = append(groups, g)
		}
		sort.Strings(groups)
		var parts []string
		for _, g := range groups {
			parts = append(parts, fmt.Sprintf("group %s: %s", g, describeMetric(e.FailedTGAllocs[g])))
		}
		return "Nomad could not place the admitted job (" + strings.Join(parts, "; ") + ")"
	}
	return ""
}

// describeMetric summarises why Nomad's scheduler rejected nodes.
func describeMetric(m *api.AllocationMetric) string {
	if m == nil {
		return "no placement"
	}
	var why []string
	add := func(kind string, by map[string]int) {
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			why = append(why, fmt.Sprintf("%s %s on %d node(s)", kind, k, by[k]))
		}
	}
	add("constraint", m.ConstraintFiltered)
	add("exhausted", m.DimensionExhausted)
	if len(why) == 0 {
		return fmt.Sprintf("%d of %d node(s) in pool %s evaluated", m.NodesEvaluated, m.NodesInPool, m.NodePool)
	}
	return strings.Join(why, ", ")
}

func (x *Executor) rollback(ctx context.Context, in *Intent, reason string) error {
	x.log.Warn("admission did not fully start; parking the job again", "job", in.JobID, "reason", reason)
	if err := x.park(ctx, in.JobID); err != nil {
		return err
	}
	if err := x.stopAll(ctx, in.JobID); err != nil {
		return err
	}
	if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
		return err
	}
	x.mu.Lock()
	delete(x.pending, in.JobID)
	x.outcomes.set(in.JobID, "admission rolled back: "+reason)
	x.mu.Unlock()
	return nil
}

// maxOutcomes bounds the outcome notes an executor keeps: one per job that
// was ever rolled back, in conflict or preempted would otherwise grow for
// as long as the agent runs.
const maxOutcomes = 10000

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefU(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefI(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func derefB(p *bool) bool { return p != nil && *p }
