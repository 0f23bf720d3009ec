package nomad

import (
	"context"
	"fmt"
	"strconv"

	"github.com/hashicorp/nomad/api"
)

// Preemption outcomes, by how the victim's tasks ended (see README.md,
// "Preemption outcome contract").
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
	// OutcomeWithdrawn: the engine withdrew the preemption within the
	// grace (its preemptor no longer waited) while every task still ran;
	// the job runs on, neither parked nor stopped.
	OutcomeWithdrawn = "withdrawn"
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

// victimOutcome is how a preempted job's allocations (those the plan
// named) stand: ended when each has finished or has a task that exited
// with the requeue code since the preemption was decided; done when each
// completed on its own (client status complete with desired status run:
// every task exited 0, not stopped by the server); requeued when some task
// exited with the requeue code, whatever the allocation's status after it
// (running again under the default restart policy, failed under
// `restart { attempts = 0 }`). Allocations Nomad no longer lists count as
// ended, not done.
//
// Done also needs the job to run nothing else: an allocation the plan did
// not name that Nomad still wants running (desired status run, not
// terminal) keeps it from being done. Nomad places such an allocation
// after the decision, e.g. the replacement of a gang member lost with its
// node, placed on the GPUs the named members free as they complete. The
// job is then not complete: taking it for done would note a completion
// that did not happen and leave that allocation running until the engine
// orders it stopped (a whole-gang requeue). Not done, the preemption
// parks the job and stops everything (settle, stopAll): the gang is
// requeued whole at once (a stop the engine ordered meanwhile, deferred
// behind this one, is then dropped). An allocation Nomad places after
// this read is left to that deferred stop (startStop, nextDeferred).
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
		// The exit code first: with `restart { attempts = 0 }` a task
		// that exits with the requeue code fails its allocation, which is
		// then terminal, and is still a requeue, not a stop. A terminal
		// allocation's tasks ended for good, so when does not matter (a
		// gang requeued because Nomad ended its run ended before the
		// requeue was decided); a live one's earlier exits were restarts.
		from := since
		if terminalStatus(a.ClientStatus) {
			from = 0
		}
		if exitedWith(a, code, from) {
			o.requeued = true
			continue
		}
		if !terminalStatus(a.ClientStatus) {
			o.ended = false
		}
	}
	if o.done && len(in.Allocs) > 0 {
		named := make(map[string]bool, len(ids))
		for _, aid := range ids {
			named[aid] = true
		}
		for _, a := range as {
			if !named[a.ID] && wantedRunning(a) {
				o.done = false
				break
			}
		}
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

// wantedRunning reports whether Nomad still wants a running: desired
// status run, and not ended on its client. Such an allocation keeps a
// preempted job from being done (victimOutcome) and a deferred stop
// from being dropped (nextDeferred).
func wantedRunning(a *api.AllocationListStub) bool {
	return a.DesiredStatus == "run" && !terminalStatus(a.ClientStatus)
}
