package executor

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killLeftovers cleans up after a supervisor that is gone: it kills the
// process group of the command recorded in the status file, if that
// process is still the command (same start time, still leading its
// group), then every process left in the task's own cgroups (children
// that left the group), and removes the cgroups the supervisor created.
// It returns the process group it killed, or 0. It does nothing once the
// supervisor has finished (its last status names neither).
func killLeftovers(dir string) int {
	var st Status
	if err := readJSON(dir, StatusFile, &st); err != nil {
		return 0
	}
	killed := 0
	if st.Phase == PhaseRunning && st.ChildPID > 0 && st.ChildStart != 0 {
		ps, err := procStat(st.ChildPID)
		if err == nil && ps.start == st.ChildStart && ps.pgrp == st.ChildPID && ps.state != 'Z' &&
			syscall.Kill(-st.ChildPID, syscall.SIGKILL) == nil {
			killed = st.ChildPID
			waitGone(st.ChildPID, st.ChildStart, 5*time.Second)
		}
	}
	if cg := st.Cgroups; cg != nil {
		KillCgroups(cg.V2, cg.Own)
		RemoveCgroups(cg.Created)
	}
	return killed
}

// waitGone waits (up to d) until the process pid that started at start
// has died: it is gone, a zombie, or the PID is another process's.
func waitGone(pid int, start uint64, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ps, err := procStat(pid)
		if err != nil || ps.start != start || ps.state == 'Z' || ps.state == 'X' {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type procInfo struct {
	pid, ppid, pgrp int
	state           byte
	start           uint64
}

// procStat reads /proc/PID/stat.
func procStat(pid int) (procInfo, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return procInfo{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+2:])
	// f[0]=state f[1]=ppid f[2]=pgrp ... f[19]=starttime (field 22 overall)
	if len(f) < 20 {
		return procInfo{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return procInfo{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0], start: start}, nil
}

// alive: the supervisor process exists, is not a zombie and is the same
// process (same start time) as when launched.
func alive(s State) bool {
	st, err := procStat(s.SupervisorPID)
	if err != nil {
		return false
	}
	if st.state == 'Z' || st.state == 'X' {
		return false
	}
	return s.SupervisorStart == 0 || st.start == s.SupervisorStart
}
