package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/message"
)

// started is a typed reply; Note is not on the wire, so no reply has it.
type started struct {
	State string      `json:"state"`
	Token fence.Token `json:"token"`
	Note  string      `json:"-"`
}

// other is another handler's reply type.
type other struct {
	Size int `json:"size"`
}

// lossy encodes as JSON it cannot decode back.
type lossy struct{}

func (lossy) MarshalJSON() ([]byte, error) { return []byte(`{"gone":1}`), nil }

func TestRun(t *testing.T) {
	e := open(t, "sqlite:"+filepath.Join(t.TempDir(), "fence.db"), time.Hour)
	ctx := t.Context()
	node := message.NewUUID()
	epoch, err := e.hb.Register(ctx, node)
	require.NoError(t, err)
	res := message.NewUUID()
	guard := func(typ string) fence.Guard {
		return fence.Guard{Claim: fence.Claim{Resource: res, Node: node, Epoch: epoch}, Key: fence.NewKey(message.NewUUID(), typ, []byte(`{}`))}
	}
	calls := 0
	start := func(ctx context.Context, tx *sql.Tx, tok fence.Token) (started, error) {
		calls++
		_, err := tx.ExecContext(ctx, e.ins, res, "start", int64(tok))
		return started{State: "running", Token: tok, Note: "not recorded"}, err
	}
	logLen := func() int {
		log, err := e.Log(ctx, res)
		require.NoError(t, err)
		return len(log)
	}

	t.Run("first run and repeat", func(t *testing.T) {
		calls = 0
		g := guard("test.v1.Start")
		first, err := sqlfence.Run(ctx, e.f, g, start)
		require.NoError(t, err)
		assert.Equal(t, started{State: "running", Token: 1}, first, "the first run returns the recorded reply: Note is zero")
		again, err := sqlfence.Run(ctx, e.f, g, start)
		require.NoError(t, err)
		assert.Equal(t, first, again, "a repeat returns the same typed value")
		assert.Equal(t, 1, calls, "a repeat does not run fn")
		assert.Equal(t, 1, logLen())
	})

	t.Run("fn error records nothing", func(t *testing.T) {
		calls = 0
		g := guard("test.v1.Start")
		refused := message.ErrConflict.WithDetails("already running elsewhere")
		before := logLen()
		got, err := sqlfence.Run(ctx, e.f, g, func(ctx context.Context, tx *sql.Tx, tok fence.Token) (started, error) {
			if _, err := tx.ExecContext(ctx, e.ins, res, "half", int64(tok)); err != nil {
				return started{}, err
			}
			return started{State: "half"}, refused
		})
		require.ErrorIs(t, err, message.ErrConflict)
		assert.Equal(t, started{}, got)
		assert.Equal(t, before, logLen(), "fn's writes rolled back")
		// Nothing was recorded: the message runs on its next delivery.
		got, err = sqlfence.Run(ctx, e.f, g, start)
		require.NoError(t, err)
		assert.Equal(t, "running", got.State)
		assert.Equal(t, 1, calls)
	})

	t.Run("recorded reply of another type", func(t *testing.T) {
		g := guard("test.v1.Start")
		_, err := sqlfence.Run(ctx, e.f, g, start)
		require.NoError(t, err)
		ran := false
		got, err := sqlfence.Run(ctx, e.f, g, func(context.Context, *sql.Tx, fence.Token) (other, error) {
			ran = true
			return other{Size: 1}, nil
		})
		require.ErrorIs(t, err, message.ErrBadReply)
		assert.Equal(t, message.RetryRan, message.AsError(err).Retry(), "the message ran when the reply was recorded")
		assert.Contains(t, err.Error(), "sqlfence_test.other")
		assert.Contains(t, err.Error(), g.Key.ID)
		assert.Equal(t, other{}, got)
		assert.False(t, ran)

		// A reply Do recorded as bytes that are not JSON.
		g = guard("test.v1.Start")
		_, err = e.f.Do(ctx, g, func(context.Context, *sql.Tx, fence.Token) ([]byte, error) { return []byte("running"), nil })
		require.NoError(t, err)
		_, err = sqlfence.Run(ctx, e.f, g, start)
		require.ErrorIs(t, err, message.ErrBadReply)
		assert.Contains(t, err.Error(), "sqlfence_test.started")
	})

	t.Run("a reply that cannot be recorded", func(t *testing.T) {
		before := logLen()
		for name, run := range map[string]func(g fence.Guard) error{
			"does not decode back": func(g fence.Guard) error {
				_, err := sqlfence.Run(ctx, e.f, g, func(ctx context.Context, tx *sql.Tx, tok fence.Token) (lossy, error) {
					_, err := tx.ExecContext(ctx, e.ins, res, "lossy", int64(tok))
					return lossy{}, err
				})
				return err
			},
			"does not encode": func(g fence.Guard) error {
				_, err := sqlfence.Run(ctx, e.f, g, func(ctx context.Context, tx *sql.Tx, tok fence.Token) (func(), error) {
					_, err := tx.ExecContext(ctx, e.ins, res, "func", int64(tok))
					return func() {}, err
				})
				return err
			},
		} {
			g := guard("test.v1.Odd")
			err := run(g)
			require.ErrorIs(t, err, message.ErrInternal, name)
			assert.Equal(t, before, logLen(), "%s: nothing committed", name)
			// Nothing was recorded: the next delivery runs.
			calls = 0
			_, err = sqlfence.Run(ctx, e.f, g, start)
			require.NoError(t, err, name)
			assert.Equal(t, 1, calls, name)
			before++
		}
	})

	t.Run("stale claim", func(t *testing.T) {
		n2 := message.NewUUID()
		e2, err := e.hb.Register(ctx, n2)
		require.NoError(t, err)
		require.NoError(t, e.hb.Deregister(ctx, n2, e2))
		calls = 0
		g := fence.Guard{Claim: fence.Claim{Resource: res, Node: n2, Epoch: e2}, Key: fence.NewKey(message.NewUUID(), "test.v1.Start", nil)}
		got, err := sqlfence.Run(ctx, e.f, g, start)
		require.ErrorIs(t, err, fence.ErrStale)
		var se *fence.StaleError
		require.True(t, errors.As(err, &se))
		assert.Equal(t, started{}, got)
		assert.Zero(t, calls)
	})

	t.Run("no key", func(t *testing.T) {
		got, err := sqlfence.Run(ctx, e.f, fence.Guard{}, func(context.Context, *sql.Tx, fence.Token) (started, error) {
			return started{State: "stopped", Note: "x"}, nil
		})
		require.NoError(t, err)
		assert.Equal(t, started{State: "stopped"}, got, "the same value a recorded reply would give")
	})
}
