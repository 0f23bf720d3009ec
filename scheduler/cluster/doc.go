// Package cluster is the scheduler's model of the cluster: nodes with their
// GPUs and topology (NVLink island, NUMA node, health), node pools and
// locality labels (rack, switch); managed jobs with their task groups and
// impact contract; and the running allocations that hold GPUs.
//
// A Store applies incremental updates (upserts and deletes from Nomad's
// event stream or from the simulator) and hands out immutable Snapshots.
// Snapshots are what the engine decides on: a cycle never sees a half-applied
// update, and deciding never blocks updates. Tables are copy-on-write and
// sharded, so a snapshot costs O(1) and an update after it copies one small
// shard, not the table.
//
// The package knows nothing of Nomad's types: the adapter (scheduler/nomad)
// and the simulator (scheduler/sim) translate into it.
package cluster
