package sqldb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

// TestDo: a write of a node whose record is gone changes nothing and
// fails as not_owner; a message's transaction runs once and its reply is
// returned to every later delivery; a failed transaction leaves nothing.
func TestDo(t *testing.T) {
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqliteURL}, {"postgres", testenv.PostgresDSN}, {"mysql", testenv.MySQLDSN}} {
		t.Run(db.name, func(t *testing.T) {
			url := db.url(t)
			ctx := t.Context()
			p := openPool(t, url)
			hb, err := sqlstore.OpenDB(ctx, p.DB, sqlstore.Config{URL: url, Table: randomPrefix() + "_hb"})
			require.NoError(t, err)
			s, err := sqldb.Open(ctx, p, sqldb.Config{Prefix: randomPrefix(), HeartbeatTable: hb.Table()})
			require.NoError(t, err)
			t.Cleanup(func() {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				assert.NoError(t, s.Drop(cctx))
				assert.NoError(t, hb.Drop(cctx))
				_ = s.Close()
				_ = hb.Close()
			})
			node := message.NewUUID()
			epoch, err := hb.Register(ctx, node)
			require.NoError(t, err)
			vm := cloud.VM{UUID: message.NewUUID(), ImageUUID: message.NewUUID(), HostUUID: message.NewUUID(), State: cloud.VMCreated}
			claim := fence.Claim{Resource: vm.UUID, Node: node, Epoch: epoch}
			key := fence.NewKey(message.NewUUID(), "test.CreateVm", []byte(`{}`))

			runs := 0
			create := func(ctx context.Context, tx cloud.Store) (cloud.VM, error) {
				runs++
				return vm, tx.AddVM(ctx, vm)
			}
			first, err := cloud.Run(ctx, s, fence.Guard{Key: key}, create)
			require.NoError(t, err)
			again, err := cloud.Run(ctx, s, fence.Guard{Key: key}, create)
			require.NoError(t, err, "a repeated message gets the first reply, not 'exists'")
			assert.Equal(t, first, again)
			assert.Equal(t, 1, runs)

			start := func(ctx context.Context, tx cloud.Store) (cloud.VM, error) {
				return tx.UpdateVM(ctx, vm.UUID, func(v *cloud.VM) error { v.State = cloud.VMRunning; return nil })
			}
			_, err = cloud.Run(ctx, s, fence.Guard{Claim: claim}, func(ctx context.Context, tx cloud.Store) (cloud.VM, error) {
				if _, err := start(ctx, tx); err != nil {
					return cloud.VM{}, err
				}
				return cloud.VM{}, message.ErrBusy.WithDetails("test: fail after the write")
			})
			require.ErrorIs(t, err, message.ErrBusy)
			got, err := s.VM(ctx, vm.UUID)
			require.NoError(t, err)
			assert.Equal(t, cloud.VMCreated, got.State, "a failed transaction rolled back")

			_, err = cloud.Run(ctx, s, fence.Guard{Claim: claim}, start)
			require.NoError(t, err)
			require.NoError(t, hb.Deregister(ctx, node, epoch)) // evicted
			_, err = cloud.Run(ctx, s, fence.Guard{Claim: claim}, func(ctx context.Context, tx cloud.Store) (cloud.VM, error) {
				return tx.UpdateVM(ctx, vm.UUID, func(v *cloud.VM) error { v.State = cloud.VMStopped; return nil })
			})
			var se *fence.StaleError
			require.True(t, errors.As(err, &se), "got %v", err)
			assert.ErrorIs(t, err, message.ErrNotOwner)
			got, err = s.VM(ctx, vm.UUID)
			require.NoError(t, err)
			assert.Equal(t, cloud.VMRunning, got.State, "the evicted node's write was not applied")
		})
	}
}
