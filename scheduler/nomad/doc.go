// Package nomad is the impact scheduler's adapter to HashiCorp Nomad, and
// the only package of the project that imports github.com/hashicorp/nomad/api.
// It watches Nomad (event stream + resync) into the core's cluster model,
// acts on the engine's plans (admit by re-registering a parked job pinned to
// its nodes, preempt by checkpoint signal, grace, re-park and stop), writes
// explanations into the jobs' Nomad Variables, elects a leader through a
// Variables lock and keeps durable state (fair-share usage, intents,
// preemption records) in Variables. See DESIGN.md, "How the scheduler acts
// on Nomad".
//
// # API for the agent
//
//	cfg := nomad.ConfigFromEnv(os.LookupEnv).Merge(fileCfg) // NOMAD_* as the CLI reads them
//	c, err := nomad.NewClient(cfg, logger)                  // address, token, TLS, namespace, region
//	err = c.EnsureNodePool(ctx, "impact-queue", "parking pool: jobs wait here until admitted")
//
//	w := nomad.NewWatcher(c, nomad.WatcherConfig{ParkingPool: "impact-queue"}, logger)
//	go w.Run(ctx)            // event stream + resync, until ctx ends
//	<-w.Ready()              // first full resync done
//	snap := w.Snapshot()     // *cluster.Snapshot for engine.Decide
//	<-w.Changes()            // coalesced "the model changed" signal (debounce it)
//	w.Stats()                // last index, events applied, resyncs, lag (metrics)
//
//	st := nomad.NewStateStore(c, nomad.StateConfig{}, logger) // Variables under impact/state/
//	usage, at, err := st.LoadUsage(ctx); err = st.SaveUsage(ctx, values, at)
//	recs, err := st.Preemptions(ctx, since)                   // preemption records (limits)
//
//	x := nomad.NewExecutor(c, st, nomad.ExecutorConfig{ParkingPool: "impact-queue", DefaultPool: "default"}, logger)
//	err = x.Recover(ctx)          // on becoming leader: finish or roll back intents
//	res := x.Apply(ctx, plan)     // engine.Plan: admissions and preemptions (preemptions continue in background)
//	x.CheckDeadlines(ctx)         // every cycle: finish admissions fully running, roll back late/failed ones
//	x.Busy(jobID), x.Outcome(jobID) // action under way; last rollback/conflict reason (for explain)
//	x.Wait()                      // on shutdown: wait for background preemptions
//
//	ew := nomad.NewExplainWriter(c, logger)
//	err = ew.Write(ctx, plan)     // Variable nomad/jobs/<job>/impact per queued job (only when changed)
//
//	el := nomad.NewElector(c, nomad.ElectorConfig{HolderID: hostname}, logger)
//	err = el.Run(ctx, func(leaderCtx context.Context) { ... }) // fn runs while leading; leaderCtx ends on loss
//	el.IsLeader()
//
// # Consistency
//
// The watcher applies event batches in index order and skips batches at or
// below the last applied index, so a reconnect never applies an event
// twice; every object also carries Nomad's ModifyIndex and an older version
// never overwrites a newer one, so the replay that follows a resync is
// harmless. It resyncs (lists nodes, jobs and allocations, replacing the
// model) at start, after an outage longer than ResyncAfter (Nomad's event
// buffer may no longer cover the gap), when a probe shows Nomad's indexes
// went backwards (a restarted agent that lost its state), after a decode
// error, and every ResyncInterval as a safety net.
//
// The executor records an intent in a Variable before it changes a job and
// removes it once the change is complete, so a leader that dies between
// deciding and acting leaves an intent that the next leader's Recover
// completes (preemptions) or checks and either adopts or drops
// (admissions): nothing is admitted twice and no job is left half-placed.
package nomad
