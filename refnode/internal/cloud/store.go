package cloud

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
)

// Store holds the records of hosts, images, VMs and jobs, shared by
// every management node of a cluster: an in-memory map for one process
// (package memdb), a SQL database for a real cluster. The nodes share it;
// they do not share which node manages what.
//
// A Store is safe for concurrent use. Every method honours ctx. UUIDs
// must be canonical (message.NormalizeUUID); a malformed one fails with
// an error matching message.ErrInvalidUUID. Records are values: what a
// method returns is the caller's, and changing it changes nothing in the
// store. Lists are sorted by UUID.
//
// Writes of the services go through [Store.Do], fenced and idempotent;
// the other write methods are for tools and tests.
//
// Store does not serialize operations on one resource: the bus does, by
// running them one at a time on the resource's ring owner. The Update
// methods are nevertheless atomic (a transaction in SQL), so that two
// writers of different fields of one record (a VM operation and a host
// ping, say) do not lose each other's writes; inside [Store.Do] an
// update holds the record until the transaction ends, so a
// compare-and-set made in the update function is atomic too.
//
// Times (Host.ConnectedAt, and a Job's CreatedAt, UpdatedAt and
// Deadline) keep microsecond precision: a store may return them
// truncated to the microsecond, in UTC and without a monotonic clock
// reading, so compare them with time.Time.Equal. The zero time stays
// zero.
//
// Package cloudtest holds the behavioural tests every Store passes.
type Store interface {
	// AddHost inserts h. A host with h.UUID already present fails with
	// an error matching message.ErrAlreadyExists.
	AddHost(ctx context.Context, h Host) error
	// Host returns the host, or an error matching message.ErrNotFound.
	Host(ctx context.Context, uuid string) (Host, error)
	// Hosts returns every host.
	Hosts(ctx context.Context) ([]Host, error)
	// UpdateHost applies update to the host atomically and returns the
	// result. If update returns an error nothing changes and that error
	// is returned as is. update must not block, call the store, or
	// change the UUID.
	UpdateHost(ctx context.Context, uuid string, update func(*Host) error) (Host, error)

	// AddImage inserts img; an existing UUID fails like AddHost.
	AddImage(ctx context.Context, img Image) error
	// Image returns the image, or an error matching message.ErrNotFound.
	Image(ctx context.Context, uuid string) (Image, error)
	// Images returns every image.
	Images(ctx context.Context) ([]Image, error)
	// UpdateImage applies update to the image atomically, like
	// UpdateHost.
	UpdateImage(ctx context.Context, uuid string, update func(*Image) error) (Image, error)
	// LockImage returns the image, or an error matching
	// message.ErrNotFound; inside [Store.Do] it holds the image's record
	// until the transaction ends, as an update does, without writing it
	// (SELECT … FOR UPDATE). Outside a transaction it is Image.
	LockImage(ctx context.Context, uuid string) (Image, error)
	// DeleteImage deletes the image, or fails with an error matching
	// message.ErrNotFound. Inside [Store.Do] it locks the record as an
	// update does and takes effect at commit; the transaction reads the
	// image as gone.
	DeleteImage(ctx context.Context, uuid string) error

	// AddVM inserts vm at Version 1, whatever vm.Version says; an
	// existing UUID fails like AddHost.
	AddVM(ctx context.Context, vm VM) error
	// VM returns the VM, or an error matching message.ErrNotFound.
	VM(ctx context.Context, uuid string) (VM, error)
	// VMs returns every VM, destroyed ones included.
	VMs(ctx context.Context) ([]VM, error)
	// UpdateVM applies update to the VM atomically, like UpdateHost,
	// and sets its Version to one more than the stored one, whatever
	// update set it to: update sees the stored Version, so it can
	// compare-and-set on it. Inside [Store.Do] every UpdateVM adds 1 (two
	// updates of one VM in one transaction add 2), and only if the
	// transaction commits. A VM at the largest int64 Version cannot be
	// updated (an error matching message.ErrInternal).
	UpdateVM(ctx context.Context, uuid string, update func(*VM) error) (VM, error)

	// AddJob inserts j at Version 1, whatever j.Version says; an
	// existing UUID fails like AddHost. j.Resource must be a canonical
	// UUID too (message.ErrInvalidUUID otherwise).
	AddJob(ctx context.Context, j Job) error
	// Job returns the job, or an error matching message.ErrNotFound.
	Job(ctx context.Context, uuid string) (Job, error)
	// Jobs returns every job, terminal ones included.
	Jobs(ctx context.Context) ([]Job, error)
	// UpdateJob applies update to the job atomically, like UpdateHost,
	// and sets its Version as UpdateVM sets a VM's (inside [Store.Do]
	// too): one more than the stored one, which update sees, whatever
	// update set it to. An update that leaves Resource not a canonical
	// UUID fails with an error matching message.ErrInvalidUUID and
	// changes nothing.
	UpdateJob(ctx context.Context, uuid string, update func(*Job) error) (Job, error)

	// Do runs fn in one transaction guarded by w (package fence): it
	// commits only while w.Claim holds, and runs once per w.Key: a later
	// Do with the same key returns the first reply without running fn.
	// fn reads and writes through tx, the store bound to the transaction
	// (tx.Do fails). Its writes take effect together when Do commits, or
	// not at all: nobody else sees them before, and if fn fails, ctx
	// ends before the commit or the fence refuses the commit, none is
	// applied. If fn fails, nothing is recorded for w.Key and its error
	// is returned; a claim that does not hold fails with a
	// *fence.StaleError (message.ErrNotOwner).
	Do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tx Store) ([]byte, error)) ([]byte, error)

	// Verify, on the store a Do with a claim gives fn, reports whether
	// the claim still holds: nil, or a *fence.StaleError. Call it just
	// before a side effect outside the store (a hypervisor call): a node
	// that stalled after the check while peers evicted it learns it
	// before it acts. Elsewhere it returns nil.
	Verify(ctx context.Context) error
}

// Run is [Store.Do] with a typed reply, recorded as JSON: a repeated
// message gets the first reply decoded.
func Run[T any](ctx context.Context, s Store, w fence.Guard, fn func(ctx context.Context, tx Store) (T, error)) (T, error) {
	var out T
	raw, err := s.Do(ctx, w, func(ctx context.Context, tx Store) ([]byte, error) {
		v, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	})
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("cloud: decode the recorded reply: %w", err)
	}
	return out, nil
}

// NotFound returns the error a [Store] answers for an unknown UUID: it
// matches message.ErrNotFound and names the kind ("host", "image", "vm",
// "job").
func NotFound(kind, uuid string) error {
	return message.ErrNotFound.WithDetails(fmt.Sprintf("%s %s does not exist", kind, uuid))
}

// Exists returns the error a [Store] answers when adding a record whose
// UUID is taken: it matches message.ErrAlreadyExists.
func Exists(kind, uuid string) error {
	return message.ErrAlreadyExists.WithDetails(fmt.Sprintf("%s %s already exists; pick another UUID", kind, uuid))
}

// CheckUUID returns nil if uuid is canonical (message.IsCanonicalUUID),
// and otherwise the error a [Store] answers for it: it matches
// message.ErrInvalidUUID and names the kind ("host", "image", "vm",
// "job").
func CheckUUID(kind, uuid string) error {
	if message.IsCanonicalUUID(uuid) {
		return nil
	}
	if _, err := message.NormalizeUUID(uuid); err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	return message.ErrInvalidUUID.WithDetails(fmt.Sprintf("%s UUID %s is not canonical; normalize it with message.NormalizeUUID", kind, uuid))
}

// NextVersion returns the Version a [Store] gives the record uuid of
// kind ("vm", "job") at an update that finds it at stored: stored+1, or
// an error matching message.ErrInternal if stored is the largest int64
// (a Version never goes back, so it cannot wrap).
func NextVersion(kind, uuid string, stored int64) (int64, error) {
	if stored == math.MaxInt64 {
		return 0, message.ErrInternal.WithDetails(fmt.Sprintf("%s %s is at version %d, the largest there is; it cannot be updated", kind, uuid, stored))
	}
	return stored + 1, nil
}
