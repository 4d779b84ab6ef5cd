package memdb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// rowKey names one record: its kind ("host", "image", "vm", "job") and
// UUID.
type rowKey struct{ kind, uuid string }

// deleted is a staged deletion: the transaction reads the record as gone,
// and the commit deletes it.
type deleted struct{}

// rowLock is a record locked by a transaction until it ends.
type rowLock struct {
	key   rowKey
	owner *txn
	done  chan struct{} // closed when the transaction ends
}

// lockFree waits until no transaction holds k's lock and returns with
// s.mu held, so that the caller's read-modify-write of k is atomic and
// cannot overwrite a write a transaction staged; on error (ctx ended) it
// returns without s.mu.
func (s *Store) lockFree(ctx context.Context, k rowKey) error {
	for {
		s.mu.Lock()
		l := s.locks[k]
		if l == nil {
			return nil
		}
		s.mu.Unlock()
		if err := waitLock(ctx, l); err != nil {
			return err
		}
	}
}

func waitLock(ctx context.Context, l *rowLock) error {
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("memdb: wait for %s %s, locked by a transaction: %w", l.key.kind, l.key.uuid, ctx.Err())
	}
}

// txn is the store a Do gives fn, bound to one transaction of one node
// ("" for the Store itself). Reads see the committed records and the
// transaction's staged writes; writes lock their record and are staged
// until commit. Safe for concurrent use.
type txn struct {
	s     *Store
	node  string
	f     *memfence.Fence // nil without UseFence
	claim fence.Claim

	// Guarded by s.mu:
	staged map[rowKey]any // a cloud.Host, cloud.Image, cloud.VM or cloud.Job
	held   []*rowLock
	ended  bool
}

var _ cloud.Store = (*txn)(nil)

// run runs fn on t and checks that the transaction may commit: ctx has
// not ended (database/sql rolls back a transaction whose ctx ended) and
// the node is still reachable.
func (t *txn) run(ctx context.Context, fn func(ctx context.Context, tx cloud.Store) ([]byte, error)) ([]byte, error) {
	reply, err := fn(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memdb: commit: %w", err)
	}
	if err := t.s.reach(t.node, "commit"); err != nil {
		return nil, err
	}
	return reply, nil
}

// commit applies the staged writes, all at once.
func (t *txn) commit() {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	for k, v := range t.staged {
		switch rec := v.(type) {
		case cloud.Host:
			t.s.hosts[k.uuid] = rec
		case cloud.Image:
			t.s.images[k.uuid] = rec
		case cloud.VM:
			t.s.vms[k.uuid] = rec
		case cloud.Job:
			t.s.jobs[k.uuid] = rec
		case deleted:
			if k.kind == "image" { // the one kind that is deleted
				delete(t.s.images, k.uuid)
			}
		}
	}
	clear(t.staged)
}

// release ends the transaction: it unlocks its records and drops what
// was not committed. It is idempotent.
func (t *txn) release() {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.ended = true
	for _, l := range t.held {
		delete(t.s.locks, l.key)
		close(l.done)
	}
	t.held = nil
	clear(t.staged)
}

// check fails if ctx ended or the node is cut off, before op.
func (t *txn) check(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return t.s.reach(t.node, op)
}

// lock takes k's lock for t, waiting while another transaction holds it.
func (t *txn) lock(ctx context.Context, k rowKey) error {
	for {
		t.s.mu.Lock()
		if t.ended {
			t.s.mu.Unlock()
			return errors.New("memdb: the transaction has ended: use tx only inside fn")
		}
		l := t.s.locks[k]
		if l == nil {
			l = &rowLock{key: k, owner: t, done: make(chan struct{})}
			t.s.locks[k] = l
			t.held = append(t.held, l)
		}
		t.s.mu.Unlock()
		if l.owner == t {
			return nil
		}
		if err := waitLock(ctx, l); err != nil {
			return err
		}
	}
}

// stagedAs returns t's staged record k, if any.
func stagedAs[T any](t *txn, k rowKey) (T, bool) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	v, ok := t.staged[k]
	if !ok {
		var zero T
		return zero, false
	}
	rec, _ := v.(T) // a deletion: the zero record
	return rec, true
}

// isDeleted reports whether t staged k's deletion.
func (t *txn) isDeleted(k rowKey) bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	_, ok := t.staged[k].(deleted)
	return ok
}

func (t *txn) stage(k rowKey, rec any) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.staged[k] = rec
}

// kindOps are the Store's committed reads of one kind of record.
type kindOps[T any] struct {
	kind string
	get  func(*Store, context.Context, string) (T, error)
	list func(*Store, context.Context) ([]T, error)
	id   func(T) string
}

var (
	hostOps = kindOps[cloud.Host]{"host", (*Store).Host, (*Store).Hosts, func(h cloud.Host) string { return h.UUID }}
	imgOps  = kindOps[cloud.Image]{"image", (*Store).Image, (*Store).Images, func(i cloud.Image) string { return i.UUID }}
	vmOps   = kindOps[cloud.VM]{"vm", (*Store).VM, (*Store).VMs, func(v cloud.VM) string { return v.UUID }}
	jobOps  = kindOps[cloud.Job]{"job", (*Store).Job, (*Store).Jobs, func(j cloud.Job) string { return j.UUID }}
)

func txGet[T any](ctx context.Context, t *txn, o kindOps[T], uuid string) (T, error) {
	var zero T
	if err := t.check(ctx, "get "+o.kind); err != nil {
		return zero, err
	}
	if t.isDeleted(rowKey{o.kind, uuid}) {
		return zero, cloud.NotFound(o.kind, uuid)
	}
	if rec, ok := stagedAs[T](t, rowKey{o.kind, uuid}); ok {
		return rec, nil
	}
	return o.get(t.s, ctx, uuid)
}

func txList[T any](ctx context.Context, t *txn, o kindOps[T]) ([]T, error) {
	if err := t.check(ctx, "list "+o.kind+"s"); err != nil {
		return nil, err
	}
	recs, err := o.list(t.s, ctx)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]T, len(recs))
	for _, r := range recs {
		byID[o.id(r)] = r
	}
	t.s.mu.Lock()
	for k, v := range t.staged {
		switch rec := v.(type) {
		case deleted:
			if k.kind == o.kind {
				delete(byID, k.uuid)
			}
		case T:
			if k.kind == o.kind {
				byID[k.uuid] = rec
			}
		}
	}
	t.s.mu.Unlock()
	keys := slices.Sorted(maps.Keys(byID))
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = byID[k]
	}
	return out, nil
}

func txAdd[T any](ctx context.Context, t *txn, o kindOps[T], rec T) error {
	uuid := o.id(rec)
	if err := t.check(ctx, "add "+o.kind); err != nil {
		return err
	}
	if err := cloud.CheckUUID(o.kind, uuid); err != nil {
		return err
	}
	if err := prepare(&rec); err != nil {
		return err
	}
	k := rowKey{o.kind, uuid}
	if err := t.lock(ctx, k); err != nil {
		return err
	}
	switch _, err := txGet(ctx, t, o, uuid); {
	case err == nil:
		return cloud.Exists(o.kind, uuid)
	case !errors.Is(err, message.ErrNotFound):
		return err
	}
	if v := versionOf(&rec); v != nil {
		*v = 1
	}
	t.stage(k, rec)
	return nil
}

func txModify[T any](ctx context.Context, t *txn, o kindOps[T], uuid string, update func(*T) error) (T, error) {
	var zero T
	if err := t.check(ctx, "update "+o.kind); err != nil {
		return zero, err
	}
	if err := cloud.CheckUUID(o.kind, uuid); err != nil {
		return zero, err
	}
	k := rowKey{o.kind, uuid}
	if err := t.lock(ctx, k); err != nil {
		return zero, err
	}
	rec, err := txGet(ctx, t, o, uuid) // locked: no other writer changes it until t ends
	if err != nil {
		return zero, err
	}
	stored := storedVersion(&rec)
	if err := update(&rec); err != nil {
		return zero, err
	}
	if got := o.id(rec); got != uuid {
		return zero, message.ErrBadRequest.WithDetails(fmt.Sprintf("memdb: update of %s %s changed its UUID to %q; UUIDs never change", o.kind, uuid, got))
	}
	if err := prepare(&rec); err != nil {
		return zero, err
	}
	if err := bump(&rec, o.kind, uuid, stored); err != nil {
		return zero, err
	}
	t.stage(k, rec)
	return rec, nil
}

// AddHost implements [cloud.Store.AddHost] in the transaction.
func (t *txn) AddHost(ctx context.Context, h cloud.Host) error { return txAdd(ctx, t, hostOps, h) }

// Host implements [cloud.Store.Host] in the transaction.
func (t *txn) Host(ctx context.Context, uuid string) (cloud.Host, error) {
	return txGet(ctx, t, hostOps, uuid)
}

// Hosts implements [cloud.Store.Hosts] in the transaction.
func (t *txn) Hosts(ctx context.Context) ([]cloud.Host, error) { return txList(ctx, t, hostOps) }

// UpdateHost implements [cloud.Store.UpdateHost] in the transaction.
func (t *txn) UpdateHost(ctx context.Context, uuid string, update func(*cloud.Host) error) (cloud.Host, error) {
	return txModify(ctx, t, hostOps, uuid, update)
}

// AddImage implements [cloud.Store.AddImage] in the transaction.
func (t *txn) AddImage(ctx context.Context, img cloud.Image) error {
	return txAdd(ctx, t, imgOps, img)
}

// Image implements [cloud.Store.Image] in the transaction.
func (t *txn) Image(ctx context.Context, uuid string) (cloud.Image, error) {
	return txGet(ctx, t, imgOps, uuid)
}

// Images implements [cloud.Store.Images] in the transaction.
func (t *txn) Images(ctx context.Context) ([]cloud.Image, error) { return txList(ctx, t, imgOps) }

// UpdateImage implements [cloud.Store.UpdateImage] in the transaction.
func (t *txn) UpdateImage(ctx context.Context, uuid string, update func(*cloud.Image) error) (cloud.Image, error) {
	return txModify(ctx, t, imgOps, uuid, update)
}

// LockImage implements [cloud.Store.LockImage] in the transaction: it
// locks the image and reads it, writing nothing.
func (t *txn) LockImage(ctx context.Context, uuid string) (cloud.Image, error) {
	if err := t.check(ctx, "lock image"); err != nil {
		return cloud.Image{}, err
	}
	if err := cloud.CheckUUID("image", uuid); err != nil {
		return cloud.Image{}, err
	}
	if err := t.lock(ctx, rowKey{"image", uuid}); err != nil {
		return cloud.Image{}, err
	}
	return txGet(ctx, t, imgOps, uuid)
}

// DeleteImage implements [cloud.Store.DeleteImage] in the transaction:
// it locks the image and stages its deletion.
func (t *txn) DeleteImage(ctx context.Context, uuid string) error {
	if err := t.check(ctx, "delete image"); err != nil {
		return err
	}
	if err := cloud.CheckUUID("image", uuid); err != nil {
		return err
	}
	k := rowKey{"image", uuid}
	if err := t.lock(ctx, k); err != nil {
		return err
	}
	if _, err := txGet(ctx, t, imgOps, uuid); err != nil {
		return err
	}
	t.stage(k, deleted{})
	return nil
}

// AddVM implements [cloud.Store.AddVM] in the transaction.
func (t *txn) AddVM(ctx context.Context, vm cloud.VM) error { return txAdd(ctx, t, vmOps, vm) }

// VM implements [cloud.Store.VM] in the transaction.
func (t *txn) VM(ctx context.Context, uuid string) (cloud.VM, error) {
	return txGet(ctx, t, vmOps, uuid)
}

// VMs implements [cloud.Store.VMs] in the transaction.
func (t *txn) VMs(ctx context.Context) ([]cloud.VM, error) { return txList(ctx, t, vmOps) }

// UpdateVM implements [cloud.Store.UpdateVM] in the transaction.
func (t *txn) UpdateVM(ctx context.Context, uuid string, update func(*cloud.VM) error) (cloud.VM, error) {
	return txModify(ctx, t, vmOps, uuid, update)
}

// AddJob implements [cloud.Store.AddJob] in the transaction.
func (t *txn) AddJob(ctx context.Context, j cloud.Job) error { return txAdd(ctx, t, jobOps, j) }

// Job implements [cloud.Store.Job] in the transaction.
func (t *txn) Job(ctx context.Context, uuid string) (cloud.Job, error) {
	return txGet(ctx, t, jobOps, uuid)
}

// Jobs implements [cloud.Store.Jobs] in the transaction.
func (t *txn) Jobs(ctx context.Context) ([]cloud.Job, error) { return txList(ctx, t, jobOps) }

// UpdateJob implements [cloud.Store.UpdateJob] in the transaction.
func (t *txn) UpdateJob(ctx context.Context, uuid string, update func(*cloud.Job) error) (cloud.Job, error) {
	return txModify(ctx, t, jobOps, uuid, update)
}

// Do fails: a transaction does not nest. Use tx itself.
func (t *txn) Do(context.Context, fence.Guard, func(context.Context, cloud.Store) ([]byte, error)) ([]byte, error) {
	return nil, errors.New("memdb: Do inside Do: use the transaction's store")
}

// Verify implements [cloud.Store.Verify] with memfence.Fence.Verify.
func (t *txn) Verify(ctx context.Context) error {
	if t.claim.IsZero() || t.f == nil {
		return nil
	}
	return t.f.Verify(ctx, t.claim)
}
