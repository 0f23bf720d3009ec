package nomad

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A token that may not read every namespace gets the stream refused (Nomad
// checks namespace=* against each namespace that exists, with the answer
// recorded from 2.0.6 below); the error says which capability is missing
// and where the example policy grants it, not only "403".
func TestWatcherStreamRefusedNamesTheMissingCapability(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/event/stream" {
			http.Error(w, "unexpected "+r.URL.Path, http.StatusNotFound)
			return
		}
		http.Error(w, "Permission denied", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(Config{Address: srv.URL}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(c, WatcherConfig{}, testLogger(t))
	_, err = w.open(context.Background(), 0)
	if err == nil {
		t.Fatal("a refused stream opened")
	}
	for _, want := range []string{"403", "read-job in every namespace", `namespace "*"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// Any other failure keeps its plain message.
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no leader", http.StatusInternalServerError)
	})
	if _, err := w.open(context.Background(), 0); err == nil || strings.Contains(err.Error(), "read-job") {
		t.Errorf("500 answer: error %v, want one without the ACL hint", err)
	}
}
