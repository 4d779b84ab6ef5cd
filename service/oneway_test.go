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

// oneWayStats sums the one-way counters of every node's bus.
func oneWayStats(nodes []*service.Node) (retried, dead, failed uint64) {
	for _, n := range nodes {
		if b := n.Bus(); b != nil {
			st := b.Stats()
			retried, dead, failed = retried+st.Retried, dead+st.DeadLettered, failed+st.Failed
		}
	}
	return retried, dead, failed
}

// TestOneWayAPIMessageKeptUntilItRuns: a one-way API message whose
// owner keeps refusing it (a fenced owner: not_owner; a database that
// failed: internal) for longer than the portal's re-routes is given back
// to api.portal and tried again, on any portal, until the owner runs it;
// it runs once successfully and is never dead-lettered.
func TestOneWayAPIMessageKeptUntilItRuns(t *testing.T) {
	for _, refusal := range []*message.Error{message.ErrNotOwner, message.ErrInternal} {
		t.Run(string(refusal.Code), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newIdem()
				l.set(func(l *idem) { l.refusing, l.refuseWith = true, refusal })
				c := startIdem(t, 3, l)
				client := c.Client(t)
				res := message.NewUUID()
				sent := time.Now()
				require.NoError(t, service.Send(t.Context(), client, APITouch{Resource: res}, bus.WithTimeout(time.Minute)))
				c.WaitFor(t, 20*time.Second, "the refused message is given back for more attempts", func() bool {
					retried, _, _ := oneWayStats(c.Live())
					return retried >= 3
				})
				refusedFor, refusals := time.Since(sent), len(l.sightings())
				l.set(func(l *idem) { l.refusing = false })
				c.WaitFor(t, 10*time.Second, "the message runs once the owner takes it", func() bool {
					var ok int
					l.set(func(l *idem) { ok = l.succeeded })
					return ok == 1
				})
				time.Sleep(10 * time.Second) // virtual: a retry still pending would run meanwhile
				var ok int
				l.set(func(l *idem) { ok = l.succeeded })
				assert.Equal(t, 1, ok, "it ran once successfully, and was not tried again after that")
				ids := map[string]int{}
				for _, s := range l.sightings() {
					assert.Equal(t, res, s.resource)
					ids[s.id]++
				}
				assert.Len(t, ids, 1, "every attempt carries the message's one id")
				retried, dead, _ := oneWayStats(c.Live())
				assert.Positive(t, retried, "the portals gave the message back for more attempts")
				assert.Zero(t, dead, "a message that runs in time is not dead-lettered")
				t.Logf("%s: refused %d times over %s (virtual), then ran; given back %d times", refusal.Code, refusals, refusedFor.Round(time.Millisecond), retried)
			})
		})
	}
}

// TestOneWayDeadLetteredAtItsDeadline: a one-way message whose owner
// refuses it until its deadline goes to the dead-letter queue, with its
// reason, instead of vanishing.
func TestOneWayDeadLetteredAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newIdem()
		l.set(func(l *idem) { l.refusing, l.refuseWith = true, message.ErrInternal })
		c := startIdem(t, 3, l)
		n := c.Node(0)
		res := message.NewUUID()
		require.NoError(t, service.Send(t.Context(), n, Touch{Resource: res}, bus.WithTimeout(3*time.Second)))
		dlq := n.Bus().DeadLetterQueue()
		c.WaitFor(t, 10*time.Second, "the message reaches the dead-letter queue", func() bool {
			q, ok := c.Network().Queue(dlq)
			return ok && q.Ready == 1
		})
		_, dead, _ := oneWayStats(c.Live())
		assert.EqualValues(t, 1, dead)
		assert.Greater(t, len(l.sightings()), 3, "it was tried again until its deadline")
	})
}

// TestOneWayWrongMessageEnds: a one-way message whose handler says it is
// wrong (not_found) runs once and ends: no retry, no dead letter.
func TestOneWayWrongMessageEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newIdem()
		l.set(func(l *idem) { l.refusing, l.refuseWith = true, message.ErrNotFound })
		c := startIdem(t, 3, l)
		client := c.Client(t)
		require.NoError(t, service.Send(t.Context(), client, APITouch{Resource: message.NewUUID()}, bus.WithTimeout(time.Minute)))
		c.WaitFor(t, 10*time.Second, "the portal counts the message as failed", func() bool {
			_, _, failed := oneWayStats(c.Live())
			return failed == 1
		})
		time.Sleep(10 * time.Second) // virtual
		assert.Len(t, l.sightings(), 1, "not tried again")
		retried, dead, _ := oneWayStats(c.Live())
		assert.Zero(t, retried)
		assert.Zero(t, dead)
	})
}
