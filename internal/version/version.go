// Package version is the one version of the three binaries, impact,
// impact-gpu and impact-exec: they are built, released and reported
// together, so `impact version`, `impact-gpu -version`, `impact-exec
// -version` and the plugins' version as Nomad shows it (the fingerprinted
// driver.impact-exec.version attribute, `nomad plugin status`) agree.
package version

import "runtime/debug"

// Version is the release, a semantic version. The plugins report it to
// Nomad as is.
const Version = "0.1.0"

// Commit is the source revision, set at build time for every binary
// alike (the GNUmakefile's -ldflags "-X .../internal/version.Commit=...");
// when unset, the revision Go stamped into the binary (go build in a git
// checkout), else empty.
var Commit = ""

// String is the version as the binaries print it: "0.1.0", or
// "0.1.0 (commit aaf3986)" when the revision is known.
func String() string {
	c := commit()
	if c == "" {
		return Version
	}
	return Version + " (commit " + c + ")"
}

func commit() string {
	if Commit != "" {
		return Commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}
