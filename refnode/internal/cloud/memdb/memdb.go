// Package memdb is an in-memory [cloud.Store] shared by the management
// nodes of one process, for the demo, tests and single-process clusters.
//
// Records live in maps under one mutex. To model a node that dies or
// loses its database connection, give each node its own view with
// [Store.For] and cut it off with [Store.SetUnreachable]: every call
// through that view then fails with an error matching [ErrUnreachable]
// and changes nothing, so a killed node can no longer write what its new
// owners wrote, as a dead process cannot.
//
// # Transactions
//
// [Store.Do] behaves as sqldb's does: fn's writes are staged and applied
// together at commit, only if fn succeeded, ctx has not ended, the node
// is still reachable and the fence lets the claim commit; otherwise none
// is applied. Until then nobody else sees them. Reads in a transaction
// see the committed records and the transaction's own writes. An update
// or add in a transaction locks the record, as SELECT … FOR UPDATE and a
// unique index do, until the transaction ends: another transaction's or
// a plain update of that record waits (bounded by its ctx), so a
// compare-and-set made in an update function holds at commit. Reads never
// wait. A VM's or a job's Version moves with its staged updates and is
// applied with them, so a transaction that does not commit leaves it as
// it was.
//
// A job's times are kept as sqldb keeps them: in UTC, truncated to the
// microsecond, without a monotonic clock reading (the zero time stays
// zero), so that a job reads back the same from either store.
package memdb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// ErrUnreachable is returned by every call through a [View] of a node cut
// off with [Store.SetUnreachable]. Nothing changed in the store, so
// retrying is safe; it fails until the node is reachable again.
var ErrUnreachable = errors.New("memdb: store unreachable from this node")

// Store is an in-memory [cloud.Store]. It is safe for concurrent use and
// needs no Close: it holds no goroutines. Calls on the Store itself never
// fail for reachability; calls through a [View] may.
type Store struct {
	mu          sync.Mutex
	hosts       map[string]cloud.Host
	images      map[string]cloud.Image
	vms         map[string]cloud.VM
	jobs        map[string]cloud.Job
	locks       map[rowKey]*rowLock // records locked by a transaction of Do
	unreachable map[string]bool     // by node, for views
	fence       *memfence.Fence     // nil until UseFence
}

var _ cloud.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{
		hosts:       make(map[string]cloud.Host),
		images:      make(map[string]cloud.Image),
		vms:         make(map[string]cloud.VM),
		jobs:        make(map[string]cloud.Job),
		locks:       make(map[rowKey]*rowLock),
		unreachable: make(map[string]bool),
	}
}

// AddHost implements [cloud.Store.AddHost].
func (s *Store) AddHost(ctx context.Context, h cloud.Host) error {
	return add(ctx, s, s.hosts, "host", h.UUID, h)
}

// Host implements [cloud.Store.Host].
func (s *Store) Host(ctx context.Context, uuid string) (cloud.Host, error) {
	return get(ctx, s, s.hosts, "host", uuid)
}

// Hosts implements [cloud.Store.Hosts].
func (s *Store) Hosts(ctx context.Context) ([]cloud.Host, error) {
	return list(ctx, s, s.hosts)
}

// UpdateHost implements [cloud.Store.UpdateHost].
func (s *Store) UpdateHost(ctx context.Context, uuid string, update func(*cloud.Host) error) (cloud.Host, error) {
	return modify(ctx, s, s.hosts, "host", uuid, update, func(h cloud.Host) string { return h.UUID })
}

// AddImage implements [cloud.Store.AddImage].
func (s *Store) AddImage(ctx context.Context, img cloud.Image) error {
	return add(ctx, s, s.images, "image", img.UUID, img)
}

// Image implements [cloud.Store.Image].
func (s *Store) Image(ctx context.Context, uuid string) (cloud.Image, error) {
	return get(ctx, s, s.images, "image", uuid)
}

// Images implements [cloud.Store.Images].
func (s *Store) Images(ctx context.Context) ([]cloud.Image, error) {
	return list(ctx, s, s.images)
}

// UpdateImage implements [cloud.Store.UpdateImage].
func (s *Store) UpdateImage(ctx context.Context, uuid string, update func(*cloud.Image) error) (cloud.Image, error) {
	return modify(ctx, s, s.images, "image", uuid, update, func(img cloud.Image) string { return img.UUID })
}

// LockImage implements [cloud.Store.LockImage]: outside a transaction,
// Image.
func (s *Store) LockImage(ctx context.Context, uuid string) (cloud.Image, error) {
	return s.Image(ctx, uuid)
}

// DeleteImage implements [cloud.Store.DeleteImage].
func (s *Store) DeleteImage(ctx context.Context, uuid string) error {
	return remove(ctx, s, s.images, "image", uuid)
}

// AddVM implements [cloud.Store.AddVM].
func (s *Store) AddVM(ctx context.Context, vm cloud.VM) error {
	return add(ctx, s, s.vms, "vm", vm.UUID, vm)
}

// VM implements [cloud.Store.VM].
func (s *Store) VM(ctx context.Context, uuid string) (cloud.VM, error) {
	return get(ctx, s, s.vms, "vm", uuid)
}

// VMs implements [cloud.Store.VMs].
func (s *Store) VMs(ctx context.Context) ([]cloud.VM, error) {
	return list(ctx, s, s.vms)
}

// UpdateVM implements [cloud.Store.UpdateVM].
func (s *Store) UpdateVM(ctx context.Context, uuid string, update func(*cloud.VM) error) (cloud.VM, error) {
	return modify(ctx, s, s.vms, "vm", uuid, update, func(vm cloud.VM) string { return vm.UUID })
}

// AddJob implements [cloud.Store.AddJob].
func (s *Store) AddJob(ctx context.Context, j cloud.Job) error {
	return add(ctx, s, s.jobs, "job", j.UUID, j)
}

// Job implements [cloud.Store.Job].
func (s *Store) Job(ctx context.Context, uuid string) (cloud.Job, error) {
	return get(ctx, s, s.jobs, "job", uuid)
}

// Jobs implements [cloud.Store.Jobs].
func (s *Store) Jobs(ctx context.Context) ([]cloud.Job, error) {
	return list(ctx, s, s.jobs)
}

// UpdateJob implements [cloud.Store.UpdateJob].
func (s *Store) UpdateJob(ctx context.Context, uuid string, update func(*cloud.Job) error) (cloud.Job, error) {
	return modify(ctx, s, s.jobs, "job", uuid, update, func(j cloud.Job) string { return j.UUID })
}

func add[T any](ctx context.Context, s *Store, rows map[string]T, kind, uuid string, rec T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := cloud.CheckUUID(kind, uuid); err != nil {
		return err
	}
	if err := prepare(&rec); err != nil {
		return err
	}
	if err := s.lockFree(ctx, rowKey{kind, uuid}); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := rows[uuid]; ok {
		return cloud.Exists(kind, uuid)
	}
	if v := versionOf(&rec); v != nil {
		*v = 1
	}
	rows[uuid] = rec
	return nil
}

// versionOf returns rec's Version, if its kind has one (a VM, a job).
func versionOf[T any](rec *T) *int64 {
	switch r := any(rec).(type) {
	case *cloud.VM:
		return &r.Version
	case *cloud.Job:
		return &r.Version
	}
	return nil
}

// prepare checks rec's fields other than its UUID, as the store checks
// them at an add and after an update, and puts them in the form the
// store keeps: a job's Resource must be canonical, and its times are
// kept as SQL keeps them (see the package documentation).
func prepare[T any](rec *T) error {
	j, ok := any(rec).(*cloud.Job)
	if !ok {
		return nil
	}
	if err := cloud.CheckUUID("job resource", j.Resource); err != nil {
		return err
	}
	j.CreatedAt, j.UpdatedAt, j.Deadline = micro(j.CreatedAt), micro(j.UpdatedAt), micro(j.Deadline)
	return nil
}

// micro returns t as a SQL store returns it: in UTC, truncated to the
// microsecond, without a monotonic clock reading; the zero time as is.
func micro(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}

// storedVersion returns a copy of rec's Version, if its kind has one,
// before an update function may change it.
func storedVersion[T any](rec *T) *int64 {
	v := versionOf(rec)
	if v == nil {
		return nil
	}
	stored := *v
	return &stored
}

// bump sets the Version of rec (of a kind that has one), updated from a
// record at version stored, to the next; see cloud.Store.UpdateVM.
func bump[T any](rec *T, kind, uuid string, stored *int64) error {
	if stored == nil {
		return nil
	}
	next, err := cloud.NextVersion(kind, uuid, *stored)
	if err != nil {
		return err
	}
	*versionOf(rec) = next
	return nil
}

func get[T any](ctx context.Context, s *Store, rows map[string]T, kind, uuid string) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if err := cloud.CheckUUID(kind, uuid); err != nil {
		return zero, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := rows[uuid]
	if !ok {
		return zero, cloud.NotFound(kind, uuid)
	}
	return rec, nil
}

func list[T any](ctx context.Context, s *Store, rows map[string]T) ([]T, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := slices.Sorted(maps.Keys(rows))
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = rows[k]
	}
	return out, nil
}

func remove[T any](ctx context.Context, s *Store, rows map[string]T, kind, uuid string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := cloud.CheckUUID(kind, uuid); err != nil {
		return err
	}
	if err := s.lockFree(ctx, rowKey{kind, uuid}); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := rows[uuid]; !ok {
		return cloud.NotFound(kind, uuid)
	}
	delete(rows, uuid)
	return nil
}

func modify[T any](ctx context.Context, s *Store, rows map[string]T, kind, uuid string, update func(*T) error, id func(T) string) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if err := cloud.CheckUUID(kind, uuid); err != nil {
		return zero, err
	}
	if err := s.lockFree(ctx, rowKey{kind, uuid}); err != nil {
		return zero, err
	}
	defer s.mu.Unlock()
	rec, ok := rows[uuid]
	if !ok {
		return zero, cloud.NotFound(kind, uuid)
	}
	stored := storedVersion(&rec)
	if err := update(&rec); err != nil {
		return zero, err
	}
	if id(rec) != uuid {
		return zero, message.ErrBadRequest.WithDetails(fmt.Sprintf("memdb: update of %s %s changed its UUID to %q; UUIDs never change", kind, uuid, id(rec)))
	}
	if err := prepare(&rec); err != nil {
		return zero, err
	}
	if err := bump(&rec, kind, uuid, stored); err != nil {
		return zero, err
	}
	rows[uuid] = rec
	return rec, nil
}

// UseFence makes [Store.Do] fence writes and record messages with an
// in-memory fence (package fence/memfence) whose claims hold while their
// node's record in members is live. Call it before the first Do.
func (s *Store) UseFence(members heartbeat.Store, cfg memfence.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fence = memfence.New(members, cfg)
}

// Do implements [cloud.Store.Do] with the fence of [Store.UseFence]:
// fn runs on a transaction whose writes are applied together at commit,
// if the fence commits the claim (see "Transactions" in the package
// documentation). Without UseFence, a Do with a claim or a key fails.
func (s *Store) Do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tx cloud.Store) ([]byte, error)) ([]byte, error) {
	return s.do(ctx, w, "", fn)
}

// do runs fn in a transaction of node ("" for the Store itself).
func (s *Store) do(ctx context.Context, w fence.Guard, node string, fn func(ctx context.Context, tx cloud.Store) ([]byte, error)) ([]byte, error) {
	s.mu.Lock()
	f := s.fence
	s.mu.Unlock()
	t := &txn{s: s, node: node, f: f, claim: w.Claim, staged: make(map[rowKey]any)}
	defer t.release()
	if f == nil {
		if w != (fence.Guard{}) {
			return nil, errors.New("memdb: Do with a claim or a key needs a fence: call UseFence first")
		}
		reply, err := t.run(ctx, fn)
		if err != nil {
			return nil, err
		}
		t.commit()
		return reply, nil
	}
	return f.Do(ctx, w, func(ctx context.Context, _ fence.Token) ([]byte, func(), error) {
		reply, err := t.run(ctx, fn)
		if err != nil {
			return nil, nil, err
		}
		return reply, t.commit, nil // applied only if the claim still holds
	})
}

// Verify implements [cloud.Store.Verify]: outside a transaction, nil.
func (s *Store) Verify(context.Context) error { return nil }
