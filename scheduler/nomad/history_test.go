package nomad

import (
	"context"
	"testing"
)

// The timeline Variable round-trips job IDs with any characters, and goes
// when emptied.
func TestTimelineRoundTrip(t *testing.T) {
	e := newEnv(t, 0)
	st := NewStateStore(e.c, StateConfig{Prefix: "impact/state"}, e.log)
	ctx := context.Background()
	want := map[string]string{"default/train.v2": `[{"state":"waiting"}]`, "ml/a b": `[{"state":"running"}]`}
	if err := st.SaveTimeline(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := st.LoadTimeline(ctx)
	if err != nil || len(got) != 2 || got["default/train.v2"] != want["default/train.v2"] || got["ml/a b"] != want["ml/a b"] {
		t.Fatalf("loaded %v, %v; want %v", got, err, want)
	}
	if err := st.SaveTimeline(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := st.LoadTimeline(ctx); err != nil || len(got) != 0 {
		t.Fatalf("after emptying: %v, %v", got, err)
	}
}
