package memdb_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/cloudtest"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConformance runs the Store suite on the Store itself, and on views
// of two nodes over one Store (the peer of a view is the other node's).
func TestConformance(t *testing.T) {
	t.Run("Store", func(t *testing.T) {
		cloudtest.Run(t, cloudtest.Harness{New: func(*testing.T) cloud.Store { return memdb.New() }})
	})
	t.Run("Views", func(t *testing.T) {
		var mu sync.Mutex
		dbs := map[cloud.Store]*memdb.Store{}
		cloudtest.Run(t, cloudtest.Harness{
			New: func(*testing.T) cloud.Store {
				db := memdb.New()
				v := db.For("11111111111111111111111111111111")
				mu.Lock()
				dbs[v] = db
				mu.Unlock()
				return v
			},
			Peer: func(_ *testing.T, s cloud.Store) cloud.Store {
				mu.Lock()
				defer mu.Unlock()
				return dbs[s].For("22222222222222222222222222222222")
			},
		})
	})
}

func TestViews(t *testing.T) {
	ctx := context.Background()
	s := memdb.New()
	const node, other = "11111111111111111111111111111111", "22222222222222222222222222222222"
	const id = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	v, w := s.For(node), s.For(other)
	require.NoError(t, v.AddHost(ctx, cloud.Host{UUID: id}))
	s.SetUnreachable(node, true)
	calls := map[string]error{
		"AddHost":     v.AddHost(ctx, cloud.Host{UUID: other}),
		"AddImage":    v.AddImage(ctx, cloud.Image{UUID: id}),
		"AddVM":       v.AddVM(ctx, cloud.VM{UUID: id}),
		"Host":        second(v.Host(ctx, id)),
		"Hosts":       second(v.Hosts(ctx)),
		"UpdateHost":  second(v.UpdateHost(ctx, id, func(*cloud.Host) error { return nil })),
		"Image":       second(v.Image(ctx, id)),
		"Images":      second(v.Images(ctx)),
		"UpdateImage": second(v.UpdateImage(ctx, id, func(*cloud.Image) error { return nil })),
		"VM":          second(v.VM(ctx, id)),
		"VMs":         second(v.VMs(ctx)),
		"UpdateVM":    second(v.UpdateVM(ctx, id, func(*cloud.VM) error { return nil })),
		"AddJob":      v.AddJob(ctx, cloud.Job{UUID: id, Resource: id}),
		"Job":         second(v.Job(ctx, id)),
		"Jobs":        second(v.Jobs(ctx)),
		"UpdateJob":   second(v.UpdateJob(ctx, id, func(*cloud.Job) error { return nil })),
	}
	for name, err := range calls {
		assert.ErrorIs(t, err, memdb.ErrUnreachable, "%s through a cut-off view", name)
	}
	hosts, err := w.Hosts(ctx)
	require.NoError(t, err, "other nodes are unaffected")
	assert.Len(t, hosts, 1, "nothing changed through the cut-off view")
	s.SetUnreachable(node, false)
	_, err = v.Host(ctx, id)
	assert.NoError(t, err)
	require.NoError(t, w.AddImage(ctx, cloud.Image{UUID: id}))
	require.NoError(t, w.AddVM(ctx, cloud.VM{UUID: id}))
	_, err = w.UpdateVM(ctx, id, func(*cloud.VM) error { return nil })
	assert.NoError(t, err)
	_, err = w.UpdateImage(ctx, id, func(*cloud.Image) error { return nil })
	assert.NoError(t, err)
	_, err = w.UpdateHost(ctx, id, func(*cloud.Host) error { return nil })
	assert.NoError(t, err)
	require.NoError(t, w.AddJob(ctx, cloud.Job{UUID: id, Resource: id}))
	_, err = w.UpdateJob(ctx, id, func(*cloud.Job) error { return nil })
	assert.NoError(t, err)
	for _, err := range []error{second(w.Image(ctx, id)), second(w.Images(ctx)), second(w.VM(ctx, id)), second(w.VMs(ctx)), second(w.Job(ctx, id)), second(w.Jobs(ctx))} {
		assert.NoError(t, err)
	}
}

// TestJobTimesAsSQL: a job's times are kept as sqldb keeps them, in UTC
// to the microsecond without a monotonic clock reading, at an add and an
// update, in a transaction too, so that a job compares equal (==,
// reflect.DeepEqual) whichever store it was read from.
func TestJobTimesAsSQL(t *testing.T) {
	ctx := t.Context()
	s := memdb.New()
	const id, vm = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	now := time.Now() // with a monotonic clock reading
	created := time.Date(2025, 6, 1, 12, 34, 56, 789012345, time.FixedZone("EST", -5*60*60))
	asSQL := func(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()).UTC() }
	require.NoError(t, s.AddJob(ctx, cloud.Job{UUID: id, Resource: vm, CreatedAt: created, UpdatedAt: now}))
	want := cloud.Job{UUID: id, Resource: vm, CreatedAt: asSQL(created), UpdatedAt: asSQL(now), Version: 1}
	got, err := s.Job(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.True(t, got.UpdatedAt == asSQL(now), "no monotonic clock reading, no zone: ==")

	_, err = s.Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		got, err := tx.UpdateJob(ctx, id, func(j *cloud.Job) error { j.Deadline = now.Add(time.Minute); return nil })
		want.Deadline, want.Version = asSQL(now.Add(time.Minute)), 2
		assert.Equal(t, want, got, "in a transaction too")
		return nil, err
	})
	require.NoError(t, err)
	got, err = s.Job(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	got, err = s.UpdateJob(ctx, id, func(j *cloud.Job) error { j.Deadline = time.Time{}.In(time.Local); return nil })
	require.NoError(t, err)
	assert.True(t, got.Deadline == time.Time{}, "the zero time stays the zero time: %#v", got.Deadline)
}

// TestStaleWriteNotApplied: a node that stalls inside a fenced
// transaction while peers evict it, and writes once it resumes, writes
// nothing: its commit is refused (not_owner) and the new owner's write
// stays, as with sqldb.
func TestStaleWriteNotApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		members := memstore.New(memstore.Config{})
		db := memdb.New()
		db.UseFence(members, memfence.Config{MaxAge: time.Second, PollEvery: 10 * time.Millisecond})
		const a, b = "11111111111111111111111111111111", "22222222222222222222222222222222"
		const img = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		ea, err := members.Register(ctx, a)
		require.NoError(t, err)
		eb, err := members.Register(ctx, b)
		require.NoError(t, err)
		require.NoError(t, db.AddImage(ctx, cloud.Image{UUID: img, Name: "first"}))
		rename := func(node string, epoch int64, name string, stall <-chan struct{}) error {
			_, err := db.For(node).Do(ctx, fence.Guard{Claim: fence.Claim{Resource: img, Node: node, Epoch: epoch}},
				func(ctx context.Context, tx cloud.Store) ([]byte, error) {
					<-stall
					_, err := tx.UpdateImage(ctx, img, func(i *cloud.Image) error { i.Name = name; return nil })
					return nil, err
				})
			return err
		}

		resume := make(chan struct{})
		stale := make(chan error, 1)
		go func() { stale <- rename(a, ea, "from a", resume) }()
		synctest.Wait() // a holds the image's fence, stalled
		require.NoError(t, members.Deregister(ctx, a, ea), "peers evict a")
		open := make(chan struct{})
		close(open)
		require.NoError(t, rename(b, eb, "from b", open), "the new owner takes the image over once a's claim died")
		close(resume)
		err = <-stale
		assert.ErrorIs(t, err, message.ErrNotOwner, "the stalled node's commit is refused")
		assert.ErrorIs(t, err, fence.ErrStale)
		got, err := db.Image(ctx, img)
		require.NoError(t, err)
		assert.Equal(t, "from b", got.Name, "the stale write was not applied")
	})
}

// TestCutOffBeforeCommit: a node cut off from the store after its
// transaction wrote, before the commit, writes nothing.
func TestCutOffBeforeCommit(t *testing.T) {
	ctx := t.Context()
	db := memdb.New()
	const node, img = "11111111111111111111111111111111", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	require.NoError(t, db.AddImage(ctx, cloud.Image{UUID: img, Name: "first"}))
	_, err := db.For(node).Do(ctx, fence.Guard{}, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		if _, err := tx.UpdateImage(ctx, img, func(i *cloud.Image) error { i.Name = "lost"; return nil }); err != nil {
			return nil, err
		}
		db.SetUnreachable(node, true)
		return nil, nil
	})
	assert.ErrorIs(t, err, memdb.ErrUnreachable)
	got, err := db.Image(ctx, img)
	require.NoError(t, err)
	assert.Equal(t, "first", got.Name, "nothing was written")
	db.SetUnreachable(node, false)
	_, err = db.For(node).UpdateImage(ctx, img, func(i *cloud.Image) error { i.Name = "second"; return nil })
	assert.NoError(t, err, "the record was not left locked")
}

func second[T any](_ T, err error) error { return err }
