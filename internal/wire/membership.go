// Package wire holds the messages and headers of the protocol nodes speak
// among themselves (membership, ring queries, cluster time, routing
// headers). docs/wire.md documents them by name for clients in other
// languages; they are not part of the Go API.
package wire

import "fmt"

// LeaveNotice asks a peer to drop a leaving node from its ring; the peer
// replies once it has.
type LeaveNotice struct {
	Node  string `json:"node"`  // the leaving node
	Epoch int64  `json:"epoch"` // the life of the node that is leaving
}

// TypeLeaveNotice is the registered name of [LeaveNotice].
const TypeLeaveNotice = "cloudbus.v1.LeaveNotice"

// RingQuery asks a node for its ring copy; it replies with [RingState].
type RingQuery struct {
	// Resource, if set, asks which node the ring copy says owns it.
	Resource string `json:"resource,omitempty"`
}

// TypeRingQuery is the registered name of [RingQuery].
const TypeRingQuery = "cloudbus.v1.RingQuery"

// RingState is a node's view of the cluster: its state and ring copy.
type RingState struct {
	Node        string   `json:"node"`            // the replying node
	State       string   `json:"state"`           // its service.State name ("serving", ...)
	Fingerprint string   `json:"fingerprint"`     // the ring copy's fingerprint, in hexadecimal
	Members     []string `json:"members"`         // the node UUIDs in the ring copy, sorted
	Owner       string   `json:"owner,omitempty"` // the owner of the query's resource by this ring copy
	Handled     uint64   `json:"handled"`         // the messages the node's services ran since it joined
}

// TypeRingState is the registered name of [RingState].
const TypeRingState = "cloudbus.v1.RingState"

// ClusterTimeQuery asks a node, through api.portal, for the cluster time;
// it replies with [ClusterTime].
type ClusterTimeQuery struct{}

// TypeClusterTimeQuery is the registered name of [ClusterTimeQuery].
const TypeClusterTimeQuery = "cloudbus.v1.ClusterTimeQuery"

// ClusterTime is a node's reading of the cluster time: the heartbeat
// store's clock as the node estimates it.
type ClusterTime struct {
	NowNS   int64  `json:"now_ns"`   // the cluster time when the node answered, ns since the Unix epoch
	ErrorNS int64  `json:"error_ns"` // the bound of NowNS's error, ns
	Node    string `json:"node"`     // the answering node
}

// TypeClusterTime is the registered name of [ClusterTime].
const TypeClusterTime = "cloudbus.v1.ClusterTime"

// HeaderOwner is the header a node sets on a message it routed by its
// ring: the owner it computed. The receiver runs the handler only if its
// own ring agrees, and answers message.ErrNotOwner otherwise.
const HeaderOwner = "cloudbus-owner"

// HeaderHops counts the forwards of a one-way message from a node that
// does not own its resource to one it believes does.
const HeaderHops = "cloudbus-hops"

// Type names of the lifecycle events.
const (
	TypeNodeJoined = "cloudbus.v1.NodeJoined"
	TypeNodeLeft   = "cloudbus.v1.NodeLeft"
)

// NodeJoined is broadcast when a management node has declared its queues
// and joined the membership; every node then adds it to its ring copy.
type NodeJoined struct {
	// Node is the canonical UUID of the node that joined.
	Node string `json:"node"`
	// Epoch identifies this start of the node; it changes on every start,
	// so events of an earlier life can be told apart.
	Epoch int64 `json:"epoch"`
}

// NodeLeft is broadcast when a node leaves: by saying goodbye, or because
// it stopped beating and was evicted. Every node removes it from its ring
// copy; calls pending towards it fail with message.ErrNodeLeft. Receivers must
// handle duplicates idempotently: several nodes may report one eviction.
type NodeLeft struct {
	// Node is the canonical UUID of the node that left.
	Node string `json:"node"`
	// Epoch is the epoch of the life that ended.
	Epoch int64 `json:"epoch"`
	// Reason says how it left.
	Reason LeaveReason `json:"reason"`
	// By is the node that evicted it; empty for a goodbye.
	By string `json:"by,omitempty"`
}

// LeaveReason says how a node left.
type LeaveReason string

// The leave reasons.
const (
	// LeaveGoodbye: the node shut down in order and announced it.
	LeaveGoodbye LeaveReason = "goodbye"
	// LeaveEvicted: the node stopped beating and a peer evicted it.
	LeaveEvicted LeaveReason = "evicted"
)

// String returns the reason, or "unknown(...)" for an unknown value.
func (r LeaveReason) String() string {
	switch r {
	case LeaveGoodbye, LeaveEvicted:
		return string(r)
	default:
		return fmt.Sprintf("unknown(%q)", string(r))
	}
}
