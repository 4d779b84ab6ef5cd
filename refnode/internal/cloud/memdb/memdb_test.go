package memdb_test

import (
	"context"
	"sync"
	"testing"

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
		"AddHost":    v.AddHost(ctx, cloud.Host{UUID: other}),
		"AddImage":   v.AddImage(ctx, cloud.Image{UUID: id}),
		"AddVM":      v.AddVM(ctx, cloud.VM{UUID: id}),
		"Host":       second(v.Host(ctx, id)),
		"Hosts":      second(v.Hosts(ctx)),
		"UpdateHost": second(v.UpdateHost(ctx, id, func(*cloud.Host) error { return nil })),
		"Image":      second(v.Image(ctx, id)),
		"Images":     second(v.Images(ctx)),
		"VM":         second(v.VM(ctx, id)),
		"VMs":        second(v.VMs(ctx)),
		"UpdateVM":   second(v.UpdateVM(ctx, id, func(*cloud.VM) error { return nil })),
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
	_, err = w.UpdateHost(ctx, id, func(*cloud.Host) error { return nil })
	assert.NoError(t, err)
	for _, err := range []error{second(w.Image(ctx, id)), second(w.Images(ctx)), second(w.VM(ctx, id)), second(w.VMs(ctx))} {
		assert.NoError(t, err)
	}
}

func second[T any](_ T, err error) error { return err }
