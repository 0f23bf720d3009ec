// Package nomadbarrier is impact-exec's gang barrier for clusters without an
// impact agent: the members of a gang find each other through Nomad's own
// service discovery (GET /v1/service/<name>) instead of the rendezvous
// server of package gang, and get the same gang.Assignment (ranks by the
// alloc_index tag, rank 0's service address as MASTER_ADDR). The protocol
// and reasoning are described at the top of nomad.go.
//
// It is internal to driver/ because only the task driver uses it; the
// rendezvous protocol that the impact agent also serves is package gang.
package nomadbarrier
