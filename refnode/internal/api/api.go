// Package api holds the messages of refnode's services, registered under
// stable, versioned names ("refnode.v1.StartVm").
//
// # Routing
//
// A message about an existing resource (StartVm, AddHost, SetImageName, …)
// implements message.Routed: the SDK routes it to its service on the node
// that owns the resource's UUID on the ring (service.Call, from a
// node or a client), and every receiver refuses it if it arrives
// without that resource. A creation message (CreateVm) and a message
// about no resource (AllocateHost) go to the local node's service. API
// messages reach either through api.portal: the portal of whichever node
// takes one forwards it by the same rule.
//
// Every reply embeds [Handling], which says which management node ran
// the message and through which node's api.portal it came, so people and
// tests can see the routing.
//
// Names are part of the wire format: never rename one; register a new
// version ("refnode.v2.…") instead.
package api

import (
	"encoding/json"
	"time"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// The service names, used in queue names and service ids.
const (
	// HostService tracks hosts and allocates them.
	HostService = "host"
	// ImageService keeps images.
	ImageService = "image"
	// VMService runs VM operations.
	VMService = "vmInstance"
)

// Handling says which management node handled a message.
type Handling struct {
	// Node is the UUID of the node whose service handled the message.
	Node string `json:"node"`
	// Portal is the UUID of the node whose api.portal forwarded the
	// message, or empty if the message did not come through api.portal.
	Portal string `json:"portal,omitempty"`
}

// AddHost adds a host; routed by its UUID to the host service of its
// owner, which connects the host and then tracks it. API.
type AddHost struct {
	// UUID is the new host's UUID, chosen by the caller.
	UUID string `json:"uuid"`
	// Name is a label for people.
	Name string `json:"name,omitempty"`
	// Address is where the host's agent listens.
	Address string `json:"address,omitempty"`
}

// GetHost reads a host's record; routed by its UUID. API.
type GetHost struct {
	// UUID is the host's UUID.
	UUID string `json:"uuid"`
}

// ReconnectHost connects the host again; routed by its UUID. API.
type ReconnectHost struct {
	// UUID is the host's UUID.
	UUID string `json:"uuid"`
}

// HostReply answers AddHost, GetHost and ReconnectHost.
type HostReply struct {
	// Host is the host's record after the operation.
	Host cloud.Host `json:"host"`
	Handling
}

// AllocateHost asks the local host service to pick a host for a new VM:
// a message about no resource, sent to the local node. Internal.
type AllocateHost struct {
	// CPUs is the number of virtual CPUs of the VM to place.
	CPUs int `json:"cpus,omitempty"`
	// MemoryMB is the VM's memory size in MiB.
	MemoryMB int `json:"memory_mb,omitempty"`
}

// HostAllocated answers AllocateHost.
type HostAllocated struct {
	// HostUUID is the chosen host.
	HostUUID string `json:"host_uuid"`
	Handling
}

// AddImage adds an image; routed by its UUID to the image service of its
// owner. API.
type AddImage struct {
	// UUID is the new image's UUID, chosen by the caller.
	UUID string `json:"uuid"`
	// Name is a label for people.
	Name string `json:"name,omitempty"`
	// URL is where the image is downloaded from.
	URL string `json:"url,omitempty"`
	// SizeMB is the image's size in MiB.
	SizeMB int64 `json:"size_mb,omitempty"`
}

// GetImage reads an image's record; routed by its UUID. API.
type GetImage struct {
	// UUID is the image's UUID.
	UUID string `json:"uuid"`
}

// ImageReply answers AddImage and GetImage.
type ImageReply struct {
	// Image is the image's record.
	Image cloud.Image `json:"image"`
	Handling
}

// DeleteImage deletes an image; routed by its UUID to the image service
// of its owner. It is refused (conflict) while a VM that is not destroyed
// uses the image; a create from the image and its deletion never both
// succeed. Each message runs once (a resend with the same id gets the
// first reply); another DeleteImage of a deleted image is not_found. API.
type DeleteImage struct {
	// UUID is the image's UUID.
	UUID string `json:"uuid"`
}

// ImageDeleted answers DeleteImage.
type ImageDeleted struct {
	// Image is the image's record as it was deleted.
	Image cloud.Image `json:"image"`
	Handling
}

// SetImageName renames an image; routed by its UUID to the image service
// of its owner. With IfName set it is a compare-and-set: the name is
// written only if the image's name is *IfName at that moment. Each
// message runs once (a resend with the same id gets the first reply),
// and only on the image's current owner, so the names of one image form
// a linearizable register. API.
type SetImageName struct {
	// UUID is the image's UUID.
	UUID string `json:"uuid"`
	// Name is the new name.
	Name string `json:"name"`
	// IfName, if set, is the name the image must have for Name to be
	// written (compare-and-set); "" is the empty name. Nil: write
	// unconditionally.
	IfName *string `json:"if_name,omitempty"`
}

// ImageNameSet answers SetImageName.
type ImageNameSet struct {
	// Image is the image's record after the operation: with the new name
	// if Set, else as the operation found it.
	Image cloud.Image `json:"image"`
	// Set reports whether the name was written: always for a plain
	// SetImageName, for a compare-and-set only if the image had the name
	// IfName.
	Set bool `json:"set"`
	Handling
}

// CreateVm creates a VM: a creation message, handled by the local node's
// VM service, which asks its own host service for a host (AllocateHost)
// and defines the VM there. Through api.portal, the portal's node is the
// local node. API.
type CreateVm struct {
	// UUID is the new VM's UUID; empty means the node picks one. Which
	// node creates the VM does not depend on it.
	UUID string `json:"uuid,omitempty"`
	// Name is a label for people.
	Name string `json:"name,omitempty"`
	// ImageUUID is the image to create the VM from; it must exist.
	ImageUUID string `json:"image_uuid"`
	// CPUs is the number of virtual CPUs. Default 1.
	CPUs int `json:"cpus,omitempty"`
	// MemoryMB is the memory size in MiB. Default 512.
	MemoryMB int `json:"memory_mb,omitempty"`
}

// VmCreated answers CreateVm.
type VmCreated struct {
	// VM is the new VM's record (state created).
	VM cloud.VM `json:"vm"`
	// AllocatedBy is the node whose host service picked the host: the
	// node that created the VM.
	AllocatedBy string `json:"allocated_by"`
	Handling
}

// StartVm starts a VM; routed by its UUID to its owner. API.
type StartVm struct {
	// UUID is the VM's UUID.
	UUID string `json:"uuid"`
}

// StopVm stops a VM; routed by its UUID to its owner. API.
type StopVm struct {
	// UUID is the VM's UUID.
	UUID string `json:"uuid"`
}

// RebootVm reboots a running VM; routed by its UUID to its owner. API.
type RebootVm struct {
	// UUID is the VM's UUID.
	UUID string `json:"uuid"`
}

// DestroyVm destroys a VM; routed by its UUID to its owner. API.
type DestroyVm struct {
	// UUID is the VM's UUID.
	UUID string `json:"uuid"`
}

// GetVm reads a VM's record; routed by its UUID to its owner. API.
type GetVm struct {
	// UUID is the VM's UUID.
	UUID string `json:"uuid"`
}

// VmReply answers the VM operations and GetVm.
type VmReply struct {
	// VM is the VM's record after the operation.
	VM cloud.VM `json:"vm"`
	Handling
}

// JobMigrateVM is the Kind of the jobs MigrateVm runs.
const JobMigrateVM = "vm.migrate"

// The steps of a migration, recorded in its job's Step.
const (
	// StepChecked: the VM's owner found that the VM may move to the
	// target and recorded the source host in the job's Args.
	StepChecked = "checked"
	// StepPrepared: the target host's owner found the host connected
	// and answering.
	StepPrepared = "target-ready"
	// StepMoved: the hypervisor moved the VM and its record names the
	// target host; the job succeeded.
	StepMoved = "moved"
)

// MigrateArgs are the Args of a migration's job (JSON).
type MigrateArgs struct {
	// HostUUID is the target host, set by whoever records the job.
	HostUUID string `json:"host_uuid"`
	// Source is the host the VM ran on when the migration was checked,
	// set by the VM's owner at StepChecked.
	Source string `json:"source_host_uuid,omitempty"`
}

// ParseMigrateArgs decodes a migration job's Args.
func ParseMigrateArgs(args string) (MigrateArgs, error) {
	var m MigrateArgs
	err := json.Unmarshal([]byte(args), &m)
	return m, err
}

// NewMigrateJob returns the pending job of a migration of vm to host,
// to record (cloud.Store.AddJob) before sending api.MigrateVm: id is the
// job's UUID, node the recording node, deadline when a job that no step
// started is failed (timeout) instead.
func NewMigrateJob(id, vm, host, node string, now time.Time, deadline time.Duration) cloud.Job {
	args, _ := json.Marshal(MigrateArgs{HostUUID: host}) // cannot fail: two strings
	return cloud.Job{UUID: id, Kind: JobMigrateVM, Resource: vm, Args: string(args), State: cloud.JobPending,
		Node: node, CreatedAt: now, UpdatedAt: now, Deadline: now.Add(deadline)}
}

// MigrateVm moves a VM to another host, as the steps of a job that the
// caller recorded first (cloud.Job, Kind JobMigrateVM, Resource the VM,
// State pending): routed by the VM's UUID to its owner, which checks the
// VM and the target, has the target host's owner prepare the host, moves
// the VM on the hypervisor and records it on the target; every step is
// recorded in the job, so a copy of the message, or the sweep of the
// VM's next owner, resumes where a dead owner stopped. Send it one-way
// (service.Send): the job carries the outcome. API.
type MigrateVm struct {
	// UUID is the VM's UUID.
	UUID string `json:"uuid"`
	// HostUUID is the host to move the VM to.
	HostUUID string `json:"host_uuid"`
	// Job is the UUID of the job recorded for this migration.
	Job string `json:"job"`
}

// JobReply answers MigrateVm (when called rather than sent): the job
// after the handler's last step.
type JobReply struct {
	// Job is the job's record.
	Job cloud.Job `json:"job"`
	Handling
}

// PrepareMigration asks the owner of a migration's target host to take a
// VM: routed by the host's UUID to its host service, which checks, under
// its claim on the host, that the host is connected and answers, and
// records the step in the job. Internal: sent by the VM's owner.
type PrepareMigration struct {
	// HostUUID is the target host's UUID.
	HostUUID string `json:"host_uuid"`
	// VM is the UUID of the VM to move there.
	VM string `json:"vm"`
	// Job is the migration's job.
	Job string `json:"job"`
}

// MigrationPrepared answers PrepareMigration.
type MigrationPrepared struct {
	// Host is the target host's record.
	Host cloud.Host `json:"host"`
	Handling
}

// ResourceUUID returns the host's UUID: AddHost is message.Routed.
func (m AddHost) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the host's UUID: GetHost is message.Routed.
func (m GetHost) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the host's UUID: ReconnectHost is message.Routed.
func (m ReconnectHost) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the image's UUID: AddImage is message.Routed.
func (m AddImage) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the image's UUID: GetImage is message.Routed.
func (m GetImage) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the image's UUID: DeleteImage is message.Routed.
func (m DeleteImage) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the image's UUID: SetImageName is message.Routed.
func (m SetImageName) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the VM's UUID: StartVm is message.Routed.
func (m StartVm) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the VM's UUID: StopVm is message.Routed.
func (m StopVm) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the VM's UUID: RebootVm is message.Routed.
func (m RebootVm) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the VM's UUID: DestroyVm is message.Routed.
func (m DestroyVm) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the VM's UUID: GetVm is message.Routed.
func (m GetVm) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the VM's UUID: MigrateVm is message.Routed.
func (m MigrateVm) ResourceUUID() string { return m.UUID }

// ResourceUUID returns the target host's UUID: PrepareMigration is
// message.Routed.
func (m PrepareMigration) ResourceUUID() string { return m.HostUUID }

// Register registers every message of this package in reg under its
// "refnode.v1." name. It is idempotent.
func Register(reg *message.Registry) error {
	for _, err := range []error{
		message.Register[AddHost](reg, "refnode.v1.AddHost"),
		message.Register[GetHost](reg, "refnode.v1.GetHost"),
		message.Register[ReconnectHost](reg, "refnode.v1.ReconnectHost"),
		message.Register[HostReply](reg, "refnode.v1.HostReply"),
		message.Register[AllocateHost](reg, "refnode.v1.AllocateHost"),
		message.Register[HostAllocated](reg, "refnode.v1.HostAllocated"),
		message.Register[AddImage](reg, "refnode.v1.AddImage"),
		message.Register[GetImage](reg, "refnode.v1.GetImage"),
		message.Register[ImageReply](reg, "refnode.v1.ImageReply"),
		message.Register[SetImageName](reg, "refnode.v1.SetImageName"),
		message.Register[ImageNameSet](reg, "refnode.v1.ImageNameSet"),
		message.Register[DeleteImage](reg, "refnode.v1.DeleteImage"),
		message.Register[ImageDeleted](reg, "refnode.v1.ImageDeleted"),
		message.Register[CreateVm](reg, "refnode.v1.CreateVm"),
		message.Register[VmCreated](reg, "refnode.v1.VmCreated"),
		message.Register[StartVm](reg, "refnode.v1.StartVm"),
		message.Register[StopVm](reg, "refnode.v1.StopVm"),
		message.Register[RebootVm](reg, "refnode.v1.RebootVm"),
		message.Register[DestroyVm](reg, "refnode.v1.DestroyVm"),
		message.Register[GetVm](reg, "refnode.v1.GetVm"),
		message.Register[VmReply](reg, "refnode.v1.VmReply"),
		message.Register[MigrateVm](reg, "refnode.v1.MigrateVm"),
		message.Register[JobReply](reg, "refnode.v1.JobReply"),
		message.Register[PrepareMigration](reg, "refnode.v1.PrepareMigration"),
		message.Register[MigrationPrepared](reg, "refnode.v1.MigrationPrepared"),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Route returns h: every reply that embeds Handling says where its
// message ran through this method.
func (h Handling) Route() Handling { return h }
