package sim

import (
	"fmt"
	"hash/fnv"
)

// IdleModel is the simulator's model of GPU holders that stop using their
// GPUs, for the utilisation layer (a trace that carried utilisation would
// replace it; none of the formats read today does, so the model is the
// only source and it is off unless asked for). It is seeded and
// deterministic: the same trace, seed and share hang the same jobs at the
// same point of their work under every policy.
//
// A share HangShare of the jobs hang once, during their first run, at a
// point drawn uniformly from 10% to 90% of that run's work (a stuck
// collective, a crashed data loader): from then on every member's GPUs
// read 0% and the run makes no progress. Left alone, it holds its GPUs
// until its walltime estimate ends, when the run is killed and the job
// requeued from its last checkpoint before the hang: Nomad reschedules
// the failed allocation under the baselines, and under impact the gang
// watch requeues the job whole (re-registering it: Job.queued). The hang
// is transient: the rerun does not hang. Jobs that do not hang read 90%.
//
// What the model costs is counted for every policy alike: the GPU-hours
// held by hung runs (from the hang to the stop), and the work lost. The
// baselines never reclaim; the impact scheduler sees utilisation samples
// (0% or 90% per allocation at each of its decisions) and acts by its
// policy's idle blocks.
type IdleModel struct {
	// HangShare is the fraction of jobs that hang, in [0, 1]; 0 turns the
	// model off.
	HangShare float64
	// Seed picks which jobs hang and where.
	Seed int64
}

// BusyUtilization is what the GPUs of a job that is not hung read.
const BusyUtilization = 90

// Validate rejects a share outside [0, 1].
func (m IdleModel) Validate() error {
	if m.HangShare < 0 || m.HangShare > 1 || m.HangShare != m.HangShare {
		return fmt.Errorf("hang share must be in [0, 1], got %v", m.HangShare)
	}
	return nil
}

// On reports whether the model does anything.
func (m IdleModel) On() bool { return m.HangShare > 0 }

// Describe says the model in one sentence for the report.
func (m IdleModel) Describe() string {
	if !m.On() {
		return "Idleness: off (no job hangs)."
	}
	return fmt.Sprintf("Idleness (seed %d): %.1f%% of jobs hang once, during their first run, at a uniform 10-90%% of its work; "+
		"a hung run reads 0%% utilisation and makes no progress until stopped or killed at its walltime estimate (then requeued from its last checkpoint; the rerun does not hang); "+
		"other runs read %d%%.", m.Seed, 100*m.HangShare, BusyUtilization)
}

// hangPoint says whether job id hangs and, if so, at which fraction of
// its first run's work.
func (m IdleModel) hangPoint(id string) (float64, bool) {
	if !m.On() {
		return 0, false
	}
	if unitOf(m.Seed, id, "hang") >= m.HangShare {
		return 0, false
	}
	return 0.1 + 0.8*unitOf(m.Seed, id, "hang-at"), true
}

// unitOf is a deterministic uniform [0, 1) draw for (seed, id, purpose).
func unitOf(seed int64, id, purpose string) float64 {
	h := fnv.New64a()
	var sb [8]byte
	for i := range sb {
		sb[i] = byte(uint64(seed) >> (8 * i))
	}
	h.Write(sb[:])
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(purpose))
	x := h.Sum64()
	x ^= x >> 31
	x *= 0x94d049bb133111eb
	x ^= x >> 29
	return float64(x>>11) / float64(1<<53)
}

// Utilization is what the GPUs of j read at t: 0 once its current run has
// hung, BusyUtilization while it runs otherwise, -1 when it holds no GPUs.
func (j *Job) Utilization(t int64) float64 {
	switch j.State {
	case Running, Stopping:
	default:
		return -1
	}
	if j.hangAt >= 0 && t >= j.hangAt {
		return 0
	}
	return BusyUtilization
}

// startRun arms the hang of a run that just started (every member placed).
func (r *runner) startRun(j *Job) {
	j.hangAt = -1
	if j.hangDone {
		return
	}
	frac, ok := r.opts.Idle.hangPoint(j.ID)
	if !ok {
		return
	}
	work := j.Duration - j.Saved
	at := j.Start + j.runOverhead(r.opts.Model) + int64(frac*float64(work))
	if at <= j.Start || at >= j.Start+j.runOverhead(r.opts.Model)+work {
		return // too short a run to hang inside
	}
	j.hangAt = at
	r.push(event{t: at, kind: evHang, job: j.Index, epoch: j.epoch})
}

// hang marks a run hung at its hang point: the scheduler hears of it (a
// Hung change) as it would from the device stats.
func (r *runner) hang(j *Job) {
	r.hungRunning++
	r.st.changes = append(r.st.changes, Change{Kind: Hung, Job: j, Model: j.Cluster, At: r.now})
	r.markDirty()
}

// endRun closes a run's hang when it stops (released, killed, finished):
// the GPU time it held hung is counted and the job never hangs again.
func (r *runner) endRun(j *Job) {
	if j.hangAt < 0 {
		return
	}
	if r.now > j.hangAt {
		r.acc.idleHeld += float64(int64(j.TotalGPUs()) * (r.now - j.hangAt))
		r.acc.hungRuns++
		r.hungRunning--
	}
	j.hangAt = -1
	j.hangDone = true
}
