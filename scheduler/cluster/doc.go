// Package cluster is the scheduler's model of the cluster: nodes with their
// GPUs and topology (NVLink island, NUMA node, health), node pools and
// locality labels (rack, switch); managed jobs with their task groups and
// impact contract; and the running allocations that hold GPUs.
//
// A Store applies incremental updates (upserts and deletes from Nomad's
// event stream or from the simulator) and hands out immutable Snapshots.
// Snapshots are what the engine decides on: a cycle never sees a half-applied
// update, and deciding never blocks updates. Tables are copy-on-write and
// sharded (1,024 shards in 32 groups), so a snapshot costs O(1) and an
// update after it copies one small shard and its group, not the table. A shard's key (JobShard, AllocShard, NodesKey)
// changes exactly when the shard does, so consumers can keep what they
// derive per shard from one cycle to the next and redo only changed shards;
// a table's key (JobsKey, AllocsKey) is unchanged while no shard of it
// changed, so they skip an unchanged table whole.
//
// Jobs carry the node constraints of their own that the scheduler checks
// (distinct_hosts, node class/datacenter/meta/attribute tests), and their
// GPU device blocks (TaskGroup.Devices: count, name, driver, the block's
// own ${device.ids} list and its constraints on the device group's
// attributes, DeviceConstraint, judged as Nomad judges them); GPUs carry
// their Nomad device group, and nodes their impact-gpu group_by and their
// device groups' attributes (Node.DeviceGroups). Nomad gives one block's GPUs from one device
// group (DeviceGroupRule), so with those facts the scheduler never admits
// what Nomad would then refuse to place for node or device reasons.
//
// The package knows nothing of Nomad's types: the adapter (scheduler/nomad)
// and the simulator (scheduler/sim) translate into it.
package cluster
