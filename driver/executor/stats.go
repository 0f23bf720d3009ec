package executor

import (
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/process"
)

// Usage is the resource use of one process or of a whole task.
type Usage struct {
	RSS        uint64
	Swap       uint64
	UserPct    float64
	SystemPct  float64
	Percent    float64
	TotalTicks float64 // CPU used expressed in MHz
}

// Sample is one stats sample of a task's process tree.
type Sample struct {
	Time  time.Time
	Agg   Usage
	ByPID map[int]Usage
}

type cpuTimes struct{ user, system float64 }

// StatsTracker computes CPU percentages between successive samples of one
// task's process tree (the task's process, its descendants and its
// process group).
type StatsTracker struct {
	mu    sync.Mutex
	prev  map[int]cpuTimes
	prevT time.Time
	mhz   float64
}

// NewStatsTracker returns a tracker; the first sample has zero CPU %.
func NewStatsTracker() *StatsTracker {
	mhz := 0.0
	if infos, err := cpu.Info(); err == nil && len(infos) > 0 {
		mhz = infos[0].Mhz
	}
	return &StatsTracker{prev: map[int]cpuTimes{}, mhz: mhz}
}

// Sample measures the tree rooted at rootPID.
func (t *StatsTracker) Sample(rootPID int) Sample {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	s := Sample{Time: now, ByPID: map[int]Usage{}}
	dt := now.Sub(t.prevT).Seconds()
	cur := map[int]cpuTimes{}
	for _, pid := range processTree(rootPID) {
		p, err := process.NewProcess(int32(pid))
		if err != nil {
			continue
		}
		var u Usage
		if mi, err := p.MemoryInfo(); err == nil {
			u.RSS, u.Swap = mi.RSS, mi.Swap
		}
		if ts, err := p.Times(); err == nil {
			c := cpuTimes{user: ts.User, system: ts.System}
			cur[pid] = c
			if prev, ok := t.prev[pid]; ok && dt > 0 && !t.prevT.IsZero() {
				u.UserPct = max(0, (c.user-prev.user)/dt*100)
				u.SystemPct = max(0, (c.system-prev.system)/dt*100)
				u.Percent = u.UserPct + u.SystemPct
				u.TotalTicks = u.Percent / 100 * t.mhz
			}
		}
		s.ByPID[pid] = u
		s.Agg.RSS += u.RSS
		s.Agg.Swap += u.Swap
		s.Agg.UserPct += u.UserPct
		s.Agg.SystemPct += u.SystemPct
		s.Agg.Percent += u.Percent
		s.Agg.TotalTicks += u.TotalTicks
	}
	t.prev, t.prevT = cur, now
	return s
}

// processTree lists rootPID, its descendants and the members of its
// process group.
func processTree(rootPID int) []int {
	if rootPID <= 0 {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []int{rootPID}
	}
	children := map[int][]int{}
	inGroup := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procStat(pid)
		if err != nil || st.state == 'Z' {
			continue
		}
		children[st.ppid] = append(children[st.ppid], pid)
		if st.pgrp == rootPID {
			inGroup[pid] = true
		}
	}
	seen := map[int]bool{}
	var out []int
	queue := []int{rootPID}
	if _, err := procStat(rootPID); err != nil {
		queue = nil
	}
	for pid := range inGroup {
		queue = append(queue, pid)
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}
