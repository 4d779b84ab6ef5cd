package volume

import (
	"errors"

	"github.com/cloudbus-go/cloudbus/message"
)

// CreateVolume creates a volume. It is about no existing resource, so
// it runs on the node that takes it from api.portal.
type CreateVolume struct {
	Name   string `json:"name"`    // for people; need not be unique
	SizeGB int    `json:"size_gb"` // positive
}

// AttachVolume attaches Volume to VM. It runs on the volume's owner.
type AttachVolume struct {
	Volume string `json:"volume"` // the volume's UUID
	VM     string `json:"vm"`     // the VM's UUID
}

// ResourceUUID routes the message to the volume's owner.
func (m AttachVolume) ResourceUUID() string { return m.Volume }

// DetachVolume detaches Volume from its VM. It runs on the volume's owner.
type DetachVolume struct {
	Volume string `json:"volume"` // the volume's UUID
}

// ResourceUUID routes the message to the volume's owner.
func (m DetachVolume) ResourceUUID() string { return m.Volume }

// GetVolume reads Volume. It runs on the volume's owner.
type GetVolume struct {
	Volume string `json:"volume"` // the volume's UUID
}

// ResourceUUID routes the message to the volume's owner.
func (m GetVolume) ResourceUUID() string { return m.Volume }

// Volume is every reply: the volume as the operation left it, and the
// node that handled it.
type Volume struct {
	UUID       string `json:"uuid"`                  // the volume's UUID
	Name       string `json:"name"`                  // as created
	SizeGB     int    `json:"size_gb"`               // as created
	AttachedTo string `json:"attached_to,omitempty"` // a VM's UUID, or "" if detached
	Version    int64  `json:"version"`               // 1 at creation, +1 per attach or detach
	Node       string `json:"node"`                  // the node that handled the message
}

// Register names the messages in reg, as every node and client must.
func Register(reg *message.Registry) error {
	return errors.Join(
		message.Register[CreateVolume](reg, "volume.v1.CreateVolume"),
		message.Register[AttachVolume](reg, "volume.v1.AttachVolume"),
		message.Register[DetachVolume](reg, "volume.v1.DetachVolume"),
		message.Register[GetVolume](reg, "volume.v1.GetVolume"),
		message.Register[Volume](reg, "volume.v1.Volume"),
	)
}
