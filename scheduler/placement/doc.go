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
// per allocation. A job's groups are placed largest first; when that
// fails, the other orders are tried (every order for up to three GPU
// groups), since one group's best fit can take the node another group,
// spread over several nodes, needed.
//
// Device groups: Nomad gives all GPUs of one device block from ONE device
// group (cluster.DeviceGroupRule), and the admission pins each block to
// the GPUs placed for it. So a group's Blocks each take their GPUs from one
// device group of the node that the block matches (and within the block's
// own ${device.ids}, when it has any, and of a group its constraints on
// the device group's attributes do not fail: Block.Cons); Slot.Blocks / SplitBlocks say which
// GPUs are whose. A node of one device group and a one-block group take
// the fast path (the whole mask). Because a device pin applies to every
// allocation of a task group alike, where several allocations of a group
// share a node the pin is their union and Nomad splits it as it likes:
// for an NVLink group on a node whose device group spans islands
// (group_by "model"), those allocations share one island (scopeFor), so
// every split is still one island. Nodes without group facts (GPU.Group
// "", the simulator) are one group and need no such rule.
// When a job does not fit, Rejections counts the nodes by the reason they
// could not take it, for explain (a device block larger than any matching
// device group is named, with the node's group_by).
//
// A Cache carries what New derives from the snapshot between cycles: the
// node table while the nodes are unchanged, and per shard of the
// allocation table the allocations' nodes, GPU masks and jobs while the
// shard is unchanged (cluster.ShardKey), so building a State after a few
// updates redoes only what they touched. Gangs are built from the
// allocations in (job ID, allocation ID) order; that order is kept
// across cycles too, and the changed shards' allocations are sorted (by
// a radix sort of the 16 bytes of the job ID after the beginning all IDs
// share, scheduler/internal/radix; by comparison when they are few) and
// merged in. A cold cycle (a new
// leader's) derives all of it from scratch; the store shares each
// allocation's node and GPU ID strings with its node, so finding a GPU's
// bit compares each ID with itself at its address, and the node statics it derives are windows of a
// few shared arrays (staticSlab), not four allocations a node. The Cache also keeps the memory of the last State
// it built (nodes, free-count indexes, gang arrays, journal) and builds the
// next in it: a State built with a cache is valid until the next New with
// that cache, which is how an engine uses it (one State per cycle, nothing
// of it kept past the cycle; its plans copy IDs out).
package placement
