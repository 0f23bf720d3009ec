package plugin

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// A plugin process is started by the Nomad client and normally ended by
// it. A client killed with SIGKILL (or a machine's agent crashing) cannot
// end it, and the plugin would run on for ever as an orphan, re-parented
// to init (seen on a real cluster: impact-gpu and impact-exec outlived a
// SIGKILLed client). The plugin watches its parent instead: once the
// parent is gone (its parent process ID changed), a device plugin exits
// at once (Nomad starts a new one when the client comes back), and a
// driver plugin exits unless a client calls it within OrphanGrace: Nomad
// reattaches to a surviving driver plugin after a client restart, and the
// tasks' supervisors are separate processes that survive either way.

// DefaultOrphanGrace is how long an orphaned driver plugin waits for a
// restarted client to reattach before it exits.
const DefaultOrphanGrace = 5 * time.Minute

// orphanWatch ends an orphaned plugin. Its fields are injectable for
// tests; serve fills them from the process.
type orphanWatch struct {
	ppid     func() int
	interval time.Duration
	// grace: 0 exits as soon as the parent is gone; otherwise the plugin
	// exits once it has been orphaned for grace with no RPC since.
	grace    time.Duration
	exit     func()
	log      hclog.Logger
	now      func() time.Time
	lastCall atomic.Int64 // unix nanos of the last RPC
	// noticed, when set, is called once the parent is seen gone (tests).
	noticed func()
}

func newOrphanWatch(grace time.Duration, log hclog.Logger) *orphanWatch {
	return &orphanWatch{ppid: os.Getppid, interval: time.Second, grace: grace, exit: func() { os.Exit(0) }, log: log, now: time.Now}
}

// run watches until ctx ends or the plugin is ended.
func (w *orphanWatch) run(ctx context.Context) {
	parent := w.ppid()
	t := time.NewTicker(w.interval)
	defer t.Stop()
	var orphaned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if orphaned.IsZero() {
			if p := w.ppid(); p == parent {
				continue
			}
			orphaned = w.now()
			w.log.Warn("the Nomad client that started this plugin is gone", "parent", parent, "grace", w.grace)
			if w.noticed != nil {
				w.noticed()
			}
		}
		if w.grace <= 0 {
			w.log.Warn("exiting: orphaned plugin")
			w.exit()
			return
		}
		last := time.Unix(0, w.lastCall.Load())
		if last.After(orphaned) {
			// A restarted client reattached: it is our client now.
			w.log.Info("a client reattached to the orphaned plugin; staying", "since", last)
			parent, orphaned = w.ppid(), time.Time{}
			continue
		}
		if w.now().Sub(orphaned) >= w.grace {
			w.log.Warn("exiting: no client reattached to the orphaned plugin", "orphaned_for", w.now().Sub(orphaned).Round(time.Second))
			w.exit()
			return
		}
	}
}

func (w *orphanWatch) touch() { w.lastCall.Store(w.now().UnixNano()) }

// serverOptions record every RPC's arrival for the watch.
func (w *orphanWatch) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			w.touch()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			w.touch()
			return h(srv, ss)
		}),
	}
}
