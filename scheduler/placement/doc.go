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
// node; unschedulable nodes, unhealthy GPUs and other pools are never used;
// neither are nodes failing a group's own constraints (node class, meta,
// attributes), and a distinct_hosts group (or job) takes at most one node
// per allocation.
// When a job does not fit, Rejections counts the nodes by the reason they
// could not take it, for explain.
//
// A Cache carries what New derives from the snapshot between cycles: the
// node table while the nodes are unchanged, and per shard of the
// allocation table the allocations' nodes, GPU masks and jobs while the
// shard is unchanged (cluster.ShardKey), so building a State after a few
// updates redoes only what they touched.
package placement
