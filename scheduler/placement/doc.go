// Package placement finds where a job's gang goes: all-or-nothing for every
// task group, topology-aware, best fit.
//
// A State is the cluster's capacity for one cycle, built from a snapshot:
// per node a healthy, used and reserved GPU mask (bit i is Node.GPUs[i]),
// the node's NVLink island masks, and the running gangs holding GPUs. Nodes
// are bucketed by free GPU count per pool, so best-fit search starts at the
// smallest sufficient bucket and a full pool is recognised in O(1): a cycle
// never scans every node for every waiting job.
//
// Every change is journaled. Checkpoint/Rollback make a tentative placement
// (a gang, a preemption scenario, a reservation's shadow schedule) free to
// undo, so all-or-nothing is a rollback away and the same code serves
// placement, preemption and backfill.
//
// Rules, in order: a group with impact_topology = "nvlink" puts each
// allocation's GPUs in one NVLink island (other topologies prefer one
// island); a multi-allocation group goes on the fewest nodes, then on nodes
// sharing a locality label (switch, then rack), with best fit on the last
// node; unschedulable nodes, unhealthy GPUs and other pools are never used.
// When a job does not fit, Rejections counts the nodes by the reason they
// could not take it, for explain.
package placement
