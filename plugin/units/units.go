// Package units is the list of units a Nomad client accepts on device
// attributes. A fingerprint with any other unit makes the client drop all
// of the plugin's devices and stop it, so every check in this project
// (package plugin's ValidateAttribute, device/topology's
// Attribute.Validate) reads this one list. It has no dependencies, so pure
// packages can import it.
package units

import "slices"

// accepted are the units of Nomad's device attribute parser: sizes (binary
// and decimal, KB as well as kB), transfer rates, frequencies and power.
var accepted = []string{
	"KiB", "MiB", "GiB", "TiB", "PiB", "EiB",
	"kB", "KB", "MB", "GB", "TB", "PB", "EB",
	"KiB/s", "MiB/s", "GiB/s", "TiB/s", "PiB/s", "EiB/s",
	"kB/s", "KB/s", "MB/s", "GB/s", "TB/s", "PB/s", "EB/s",
	"MHz", "GHz",
	"mW", "W", "kW", "MW", "GW",
}

// All returns the accepted units (a copy).
func All() []string { return slices.Clone(accepted) }

// Known reports whether the client accepts unit u (case-sensitive, as the
// client is).
func Known(u string) bool { return slices.Contains(accepted, u) }
