// Command impact-exec is the impact-exec Nomad task driver plugin; see
// package driver. A Nomad client starts it from its plugin directory; run
// by hand it explains how to install it (-h also lists its subcommands).
package main

import (
	"os"

	"github.com/impact-sched/nomad-impact/driver"
)

func main() {
	os.Exit(driver.Main(os.Args[1:], os.Stdout, os.Stderr))
}
