package message

import "fmt"

// Type names of the built-in types, registered in every [Registry].
const (
	TypeNodeJoined = "cloudbus.v1.NodeJoined"
	TypeNodeLeft   = "cloudbus.v1.NodeLeft"
	TypeEmpty      = "cloudbus.v1.Empty"
)

// Empty is a payload with no fields, for requests that need no arguments
// and replies that carry no result.
type Empty struct{}

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
// copy; calls pending towards it fail with [ErrNodeLeft]. Receivers must
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
