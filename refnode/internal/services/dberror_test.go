package services_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failingReads is a store whose image reads fail, while failing is set,
// as a SQL store's do when its database is cut: with the masked URL and
// the driver's words in the text.
type failingReads struct {
	cloud.Store
	failing  atomic.Bool
	timedOut atomic.Bool // the failure came with a statement's deadline
}

// dbURL is how the failing store names its database: what a reply must
// never show.
var dbURL = sqlconn.URL{Dialect: sqlconn.Postgres, Masked: "postgres://cloud:xxxxx@db7.internal.example:5432/cloud"}

func (s *failingReads) Image(ctx context.Context, id string) (cloud.Image, error) {
	if s.failing.Load() {
		if s.timedOut.Load() {
			stmt, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Millisecond))
			defer cancel()
			ctx = stmt
		}
		return cloud.Image{}, dbURL.Fail(ctx, "read image "+id, errors.New("dial tcp 10.20.30.40:5432: connect: connection refused"))
	}
	return s.Store.Image(ctx, id)
}

// TestDatabaseErrorsDoNotNameTheDatabase: a handler failing on a
// database error answers with the error's class and where its cause was
// logged, never with the database's address or the driver's text.
func TestDatabaseErrorsDoNotNameTheDatabase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &failingReads{}
		f := startWith(t, 2, simhv.Config{}, func(s cloud.Store) cloud.Store {
			store.Store = s
			return store
		})
		c, cl := f.c, f.cl
		ctx := t.Context()
		id := message.NewUUID()
		_, err := service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: id, Name: "img"})
		require.NoError(t, err)

		store.failing.Store(true)
		_, err = service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: id})
		require.Error(t, err)
		assert.ErrorIs(t, err, message.ErrInternal, "a database failure is internal: outcome unknown")
		// ":5432", not "5432": the node's UUID and the message id are
		// hex, and once had "5432" in them.
		for _, secret := range []string{"db7.internal.example", ":5432", "10.20.30.40", "postgres", "connection refused"} {
			assert.NotContains(t, err.Error(), secret)
		}
		assert.Contains(t, err.Error(), "the database failed")
		assert.Contains(t, err.Error(), c.Owner(id), "it names the node whose log has the cause")

		// The same failure at a statement's deadline: timeout.
		store.timedOut.Store(true)
		_, err = service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: id})
		require.Error(t, err)
		assert.ErrorIs(t, err, message.ErrTimeout)
		assert.NotContains(t, err.Error(), "db7.internal.example")
		assert.Contains(t, err.Error(), "the database failed")

		store.failing.Store(false)
		_, err = service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: id})
		require.NoError(t, err, "healed")
	})
}
