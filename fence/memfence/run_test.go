package memfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
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
	ctx := t.Context()
	members := memstore.New(memstore.Config{})
	f := memfence.New(members, memfence.Config{MaxAge: time.Hour})
	node := message.NewUUID()
	epoch, err := members.Register(ctx, node)
	require.NoError(t, err)
	res := message.NewUUID()
	guard := func(typ string) fence.Guard {
		return fence.Guard{Claim: fence.Claim{Resource: res, Node: node, Epoch: epoch}, Key: fence.NewKey(message.NewUUID(), typ, []byte(`{}`))}
	}
	var log []string // what committed
	calls := 0
	start := func(ctx context.Context, tok fence.Token) (started, func(), error) {
		calls++
		return started{State: "running", Token: tok, Note: "not recorded"}, func() { log = append(log, "start") }, nil
	}

	t.Run("first run and repeat", func(t *testing.T) {
		calls, log = 0, nil
		g := guard("test.v1.Start")
		first, err := memfence.Run(ctx, f, g, start)
		require.NoError(t, err)
		assert.Equal(t, started{State: "running", Token: 1}, first, "the first run returns the recorded reply: Note is zero")
		again, err := memfence.Run(ctx, f, g, start)
		require.NoError(t, err)
		assert.Equal(t, first, again, "a repeat returns the same typed value")
		assert.Equal(t, 1, calls, "a repeat does not run fn")
		assert.Equal(t, []string{"start"}, log)
	})

	t.Run("fn error records nothing", func(t *testing.T) {
		calls, log = 0, nil
		g := guard("test.v1.Start")
		got, err := memfence.Run(ctx, f, g, func(context.Context, fence.Token) (started, func(), error) {
			return started{State: "half"}, func() { log = append(log, "half") }, message.ErrConflict.WithDetails("attached elsewhere")
		})
		require.ErrorIs(t, err, message.ErrConflict)
		assert.Equal(t, started{}, got)
		assert.Empty(t, log, "commit was not called")
		got, err = memfence.Run(ctx, f, g, start)
		require.NoError(t, err)
		assert.Equal(t, "running", got.State)
		assert.Equal(t, 1, calls, "nothing was recorded: the next delivery runs")
	})

	t.Run("recorded reply of another type", func(t *testing.T) {
		g := guard("test.v1.Start")
		_, err := memfence.Run(ctx, f, g, start)
		require.NoError(t, err)
		ran := false
		got, err := memfence.Run(ctx, f, g, func(context.Context, fence.Token) (other, func(), error) {
			ran = true
			return other{Size: 1}, nil, nil
		})
		require.ErrorIs(t, err, message.ErrBadReply)
		assert.Contains(t, err.Error(), "memfence_test.other")
		assert.Equal(t, other{}, got)
		assert.False(t, ran)

		g = guard("test.v1.Start")
		_, err = f.Do(ctx, g, func(context.Context, fence.Token) ([]byte, func(), error) { return []byte("running"), nil, nil })
		require.NoError(t, err)
		_, err = memfence.Run(ctx, f, g, start)
		require.ErrorIs(t, err, message.ErrBadReply)
		assert.Contains(t, err.Error(), "memfence_test.started")
	})

	t.Run("a reply that cannot be recorded", func(t *testing.T) {
		calls, log = 0, nil
		g := guard("test.v1.Odd")
		_, err := memfence.Run(ctx, f, g, func(context.Context, fence.Token) (lossy, func(), error) {
			return lossy{}, func() { log = append(log, "lossy") }, nil
		})
		require.ErrorIs(t, err, message.ErrInternal)
		assert.Contains(t, err.Error(), "memfence_test.lossy")
		assert.Empty(t, log, "commit was not called")
		_, err = memfence.Run(ctx, f, g, start)
		require.NoError(t, err)
		assert.Equal(t, 1, calls, "nothing was recorded: the next delivery runs")
	})

	t.Run("stale claim", func(t *testing.T) {
		calls = 0
		n2 := message.NewUUID()
		e2, err := members.Register(ctx, n2)
		require.NoError(t, err)
		require.NoError(t, members.Deregister(ctx, n2, e2))
		g := fence.Guard{Claim: fence.Claim{Resource: res, Node: n2, Epoch: e2}, Key: fence.NewKey(message.NewUUID(), "test.v1.Start", nil)}
		got, err := memfence.Run(ctx, f, g, start)
		var se *fence.StaleError
		require.True(t, errors.As(err, &se), "%v", err)
		assert.Equal(t, started{}, got)
		assert.Zero(t, calls)
	})
}

// TestContextEndedBeforeCommit: a transaction whose context ends while
// it stages its writes is not applied, nor its reply recorded, as a SQL
// transaction whose context ends is rolled back; the message runs again
// when delivered again.
func TestContextEndedBeforeCommit(t *testing.T) {
	members := memstore.New(memstore.Config{})
	f := memfence.New(members, memfence.Config{MaxAge: time.Hour})
	node := message.NewUUID()
	epoch, err := members.Register(t.Context(), node)
	require.NoError(t, err)
	g := fence.Guard{Claim: fence.Claim{Resource: message.NewUUID(), Node: node, Epoch: epoch}, Key: fence.NewKey(message.NewUUID(), "test.v1.Start", []byte(`{}`))}
	applied := 0
	ctx, cancel := context.WithCancel(t.Context())
	_, err = memfence.Run(ctx, f, g, func(context.Context, fence.Token) (started, func(), error) {
		cancel() // the caller's deadline passes while the handler works
		return started{State: "late"}, func() { applied++ }, nil
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, applied, "nothing applied")
	rep, err := memfence.Run(t.Context(), f, g, func(context.Context, fence.Token) (started, func(), error) {
		return started{State: "again"}, func() { applied++ }, nil
	})
	require.NoError(t, err)
	assert.Equal(t, "again", rep.State, "nothing recorded: the next delivery runs")
	assert.Equal(t, 1, applied)
}
