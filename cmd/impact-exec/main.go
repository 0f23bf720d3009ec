// Command impact-exec is the impact-exec Nomad task driver plugin; see
// package driver.
package main

import (
	"os"

	"github.com/impact-sched/nomad-impact/driver"
)

func main() {
	os.Exit(driver.Main(os.Args[1:], os.Stderr))
}
