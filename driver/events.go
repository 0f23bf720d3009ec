package driver

import (
	"sync"
	"time"

	"github.com/impact-sched/nomad-impact/plugin/proto/driverpb"
)

// maxPending bounds the events kept while no TaskEvents stream is open.
const maxPending = 1024

// eventBroker fans task events out to the open TaskEvents streams and keeps
// them (bounded) while none is open, e.g. between a plugin start and the
// client subscribing.
type eventBroker struct {
	mu      sync.Mutex
	subs    map[chan *driverpb.DriverTaskEvent]struct{}
	pending []*driverpb.DriverTaskEvent
}

func newEventBroker() *eventBroker {
	return &eventBroker{subs: map[chan *driverpb.DriverTaskEvent]struct{}{}}
}

func (b *eventBroker) publish(ev *driverpb.DriverTaskEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) == 0 {
		if len(b.pending) >= maxPending {
			b.pending = b.pending[1:]
		}
		b.pending = append(b.pending, ev)
		return
	}
	for ch := range b.subs {
		select {
		case ch <- ev:
		default: // a stuck stream must not block the others
		}
	}
}

func (b *eventBroker) subscribe() (<-chan *driverpb.DriverTaskEvent, func()) {
	b.mu.Lock()
	ch := make(chan *driverpb.DriverTaskEvent, maxPending+len(b.pending))
	for _, ev := range b.pending {
		ch <- ev
	}
	b.pending = nil
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

// drain waits (at most d) until every open stream has taken its queued
// events, so they are on their way before a task's exit is reported.
func (b *eventBroker) drain(d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		b.mu.Lock()
		queued := 0
		for ch := range b.subs {
			queued += len(ch)
		}
		b.mu.Unlock()
		if queued == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TaskEvents streams driver events (gang barrier progress, propagation)
// for the plugin's lifetime.
func (d *Driver) TaskEvents(_ *driverpb.TaskEventsRequest, stream driverpb.Driver_TaskEventsServer) error {
	ch, cancel := d.events.subscribe()
	defer cancel()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}
