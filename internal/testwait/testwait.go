// Package testwait holds the polling helpers of the driver's and the gang
// protocol's tests, which wait on a condition with a deadline instead of
// sleeping and hoping: the supervisor, the plugin process and the rendezvous
// server all act asynchronously, and a loaded -race run may take far longer
// than usual. It is internal so that no binary outside this module links it.
package testwait

import (
	"os"
	"testing"
	"time"
)

// Poll is how often a condition is checked.
const Poll = 10 * time.Millisecond

// For fails the test unless cond holds within d.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(Poll)
	}
}

// File waits until path exists with some content and returns it.
func File(t testing.TB, path string, d time.Duration) string {
	t.Helper()
	var out string
	For(t, d, path+" written", func() bool {
		b, err := os.ReadFile(path)
		out = string(b)
		return err == nil && len(b) > 0
	})
	return out
}
