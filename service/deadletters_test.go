package service_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// TestReplayDeadLettersThroughTheRing: a one-way message dead-lettered
// at its deadline on the owner of its resource, replayed after that
// owner left, runs on the resource's owner now, once, and leaves the
// dead-letter queue.
func TestReplayDeadLettersThroughTheRing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newIdem()
		l.set(func(l *idem) { l.refusing, l.refuseWith = true, message.ErrInternal })
		c := startIdem(t, 3, l)
		n, gone := c.Node(0), c.Node(1)
		res := ownedBy(c, gone.UUID())
		require.NoError(t, service.Send(t.Context(), n, Touch{Resource: res}, bus.WithTimeout(3*time.Second)))
		var dls []bus.DeadLetter
		c.WaitFor(t, 10*time.Second, "the message reaches the dead-letter queue", func() bool {
			var err error
			dls, err = n.DeadLetters(t.Context(), 0)
			return err == nil && len(dls) == 1
		})
		dl := dls[0]
		assert.Equal(t, res, dl.Resource)
		assert.Equal(t, bus.ServiceID("idem", gone.UUID()), dl.ServiceID, "sent to the owner of its resource then")
		assert.Contains(t, dl.Reason, "deadline")

		c.Kill(gone.UUID())
		c.WaitGone(t, gone.UUID(), 30*time.Second)
		c.WaitConverged(t, 10*time.Second)
		l.set(func(l *idem) { l.refusing = false })
		before := len(l.sightings())
		out, err := n.ReplayDeadLetters(t.Context(), dl.ID)
		require.NoError(t, err)
		assert.Equal(t, []string{dl.ID}, out.Replayed)
		assert.Empty(t, out.Missing)
		c.WaitFor(t, 10*time.Second, "the replayed message runs", func() bool {
			var ok int
			l.set(func(l *idem) { ok = l.succeeded })
			return ok == 1
		})
		seen := l.sightings()[before:]
		require.Len(t, seen, 1, "it ran once")
		assert.Equal(t, dl.ID, seen[0].id, "with its own id")
		assert.Equal(t, c.Owner(res), seen[0].node, "on the resource's owner now")
		assert.NotEqual(t, gone.UUID(), seen[0].node)
		left, err := c.Node(2).DeadLetters(t.Context(), 0)
		require.NoError(t, err)
		assert.Empty(t, left, "a replayed message leaves the dead-letter queue")
	})
}
