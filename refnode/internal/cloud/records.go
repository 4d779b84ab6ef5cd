package cloud

import (
	"fmt"
	"time"
)

// HostStatus is the connection status of a host, as last seen by the
// management node that tracks it.
type HostStatus string

// The host statuses.
const (
	// HostConnected: the tracking node connected to the host and its
	// pings succeed.
	HostConnected HostStatus = "connected"
	// HostDisconnected: the host stopped answering pings, or the last
	// connect failed; its tracking node keeps trying to reconnect.
	HostDisconnected HostStatus = "disconnected"
)

// String returns the status, or `unknown("x")` for a value this package
// does not define.
func (s HostStatus) String() string {
	switch s {
	case HostConnected, HostDisconnected:
		return string(s)
	default:
		return fmt.Sprintf("unknown(%q)", string(s))
	}
}

// Host is a hypervisor host. Its record says which management node
// tracks it (ManagedBy); that is bookkeeping for people and tests, not
// routing: messages about a host always go to its ring owner, and the
// owner writes itself into ManagedBy when it connects.
type Host struct {
	// UUID identifies the host, in canonical form.
	UUID string `json:"uuid"`
	// Name is a label for people.
	Name string `json:"name,omitempty"`
	// Address is where the host's agent listens, e.g. "10.0.0.11".
	Address string `json:"address,omitempty"`
	// Status is the connection status.
	Status HostStatus `json:"status"`
	// ManagedBy is the UUID of the management node that connected the
	// host last and pings it.
	ManagedBy string `json:"managed_by,omitempty"`
	// Takeovers counts the times a node took the host over from the
	// node that managed it (after a ring change) and reconnected it.
	Takeovers int `json:"takeovers,omitempty"`
	// ConnectedAt is when the host was last connected.
	ConnectedAt time.Time `json:"connected_at,omitzero"`
}

// Image is a VM image.
type Image struct {
	// UUID identifies the image, in canonical form.
	UUID string `json:"uuid"`
	// Name is a label for people.
	Name string `json:"name,omitempty"`
	// URL is where the image is downloaded from.
	URL string `json:"url,omitempty"`
	// SizeMB is the image's size in MiB.
	SizeMB int64 `json:"size_mb,omitempty"`
}

// VM is a virtual machine instance.
type VM struct {
	// UUID identifies the VM, in canonical form.
	UUID string `json:"uuid"`
	// Name is a label for people.
	Name string `json:"name,omitempty"`
	// ImageUUID is the image the VM was created from.
	ImageUUID string `json:"image_uuid"`
	// HostUUID is the host the VM runs on.
	HostUUID string `json:"host_uuid"`
	// CPUs is the number of virtual CPUs.
	CPUs int `json:"cpus,omitempty"`
	// MemoryMB is the memory size in MiB.
	MemoryMB int `json:"memory_mb,omitempty"`
	// State is the VM's state; see [Transition].
	State VMState `json:"state"`
	// Version counts the record's committed writes: a Store sets it to 1
	// when it adds the VM and adds 1 at every update that commits, and
	// ignores the value it is given. A repair compares it to order itself
	// against acknowledged writes (package fence, "Side effects outside
	// the database").
	Version int64 `json:"version"`
}
