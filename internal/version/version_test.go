package version

import "testing"

// The release alone, or with the commit the build stamped (the
// GNUmakefile sets Commit for all three binaries alike).
func TestString(t *testing.T) {
	old := Commit
	t.Cleanup(func() { Commit = old })
	Commit = "aaf3986"
	if got := String(); got != Version+" (commit aaf3986)" {
		t.Errorf("String() = %q", got)
	}
	Commit = ""
	if got := String(); got != Version && got[:len(Version)+len(" (commit ")] != Version+" (commit " {
		t.Errorf("String() without Commit = %q", got)
	}
}
