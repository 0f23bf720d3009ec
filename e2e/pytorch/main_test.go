package pytorch

import (
	"testing"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

// TestMain says once, for the package, when its tests skip for want of a
// nomad binary (make test prints it; go test shows it with -v).
func TestMain(m *testing.M) { nomadagent.Main(m, "e2e/pytorch") }
