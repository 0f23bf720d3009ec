//go:build !(linux && cgo)

package nvml

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/device/gpu"
)

// stub is the backend of builds without cgo (or off Linux): go-nvml needs
// cgo, so no GPU can be seen.
type stub struct{}

// New returns a backend that reports gpu.ErrUnavailable.
func New(logger hclog.Logger) gpu.Backend { return stub{} }

func (stub) Inventory(context.Context) (gpu.Inventory, error) {
	return gpu.Inventory{}, fmt.Errorf("%w: impact-gpu was built without cgo (or not for Linux), so NVML cannot be used", gpu.ErrUnavailable)
}

func (stub) Stats(context.Context, []string) ([]gpu.Stats, error) { return nil, nil }

func (stub) WatchHealth(ctx context.Context, _ chan<- gpu.HealthEvent) error {
	<-ctx.Done()
	return nil
}

func (stub) Close() error { return nil }
