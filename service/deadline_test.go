package service_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterTime: nodes measure the heartbeat store's clock, a client
// measures it through api.portal, and both write deadlines in it.
func TestClusterTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := startCluster(t, 3, newJournal(), servicetest.Options{})
		for _, n := range c.Live() {
			now, bound, ok := n.ClusterTime()
			require.True(t, ok, "node %s measured the store's clock", n.UUID())
			assert.Equal(t, time.Now(), now, "memstore's clock is this process's")
			assert.Less(t, bound, time.Millisecond, "no latency: only the drift allowance since the last beat")
		}
		client := c.Client(t)
		now, _, ok := client.ClusterTime()
		require.True(t, ok, "the client measured the cluster time when it opened")
		assert.Equal(t, time.Now(), now)
	})
}

// TestClientRecoversFromAMisreadClock: a client whose estimate of the
// cluster time went a minute behind (it believed a node that had just
// stepped its clock) writes deadlines that passed already, and its calls
// are refused as late. Its next measurement carries only its time left,
// so a node answers it, and two agreeing measurements bring the estimate
// back: its calls run again. A call that timed out makes the client
// measure again at once (at most once per 500 ms), not at its next
// 10 s period: its calls run again within 2 s of the first refusal.
func TestClientRecoversFromAMisreadClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := startCluster(t, 3, newJournal(), servicetest.Options{})
		client := c.Client(t)
		client.MisreadClusterTime(-time.Minute)
		now, _, ok := client.ClusterTime()
		require.True(t, ok)
		require.WithinDuration(t, time.Now().Add(-time.Minute), now, time.Millisecond, "the client believes the misreading")
		call := func() error {
			_, err := service.Call[Touched](t.Context(), client, APITouch{Resource: message.NewUUID()}, bus.WithTimeout(time.Second))
			return err
		}
		require.ErrorIs(t, call(), message.ErrTimeout, "a deadline a minute in the past: refused as late")
		start := time.Now()
		c.WaitFor(t, time.Minute, "the client's calls run again", func() bool { return call() == nil })
		took := time.Since(start)
		t.Logf("the client's calls ran again %s later", took)
		assert.Less(t, took, 2*time.Second, "the refused call made the client measure again at once")
		now, _, _ = client.ClusterTime()
		assert.WithinDuration(t, time.Now(), now, time.Millisecond, "the estimate is right again")
	})
}

// TestLateAPIMessagesNeverRun: API calls made while no portal could take
// them (every node cut off from the broker) wait in api.portal; their
// callers time out; when the nodes come back, those messages are
// refused as late and no handler runs them, while new calls succeed.
func TestLateAPIMessagesNeverRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{
			Heartbeat: heartbeat.Config{EvictAfter: time.Hour}, // the broker cut must not evict anyone
		})
		client := c.Client(t)
		for i := range 3 {
			c.Partition(c.Node(i).UUID(), true)
		}
		const calls = 10
		errs := make(chan error, calls)
		for range calls {
			go func() {
				_, err := service.Call[Touched](t.Context(), client, APITouch{Resource: message.NewUUID()}, bus.WithTimeout(time.Second))
				errs <- err
			}()
		}
		for range calls {
			assert.ErrorIs(t, <-errs, message.ErrTimeout)
		}
		time.Sleep(time.Second) // long after every deadline
		for i := range 3 {
			c.Partition(c.Node(i).UUID(), false)
		}
		wctx, wcancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer wcancel()
		ok := c.Await(wctx, "every waiting API message is refused as late", func() bool {
			var late uint64
			for _, n := range c.Live() {
				late += n.Bus().Stats().Late
			}
			return late == calls
		})
		if ok != nil {
			for i := range 3 {
				n := c.Node(i)
				t.Logf("node %d %s: %+v, epoch %d", i, n.State(), n.Bus().Stats(), n.Epoch())
			}
			t.Logf("live %d; portal %+v", len(c.Live()), func() any { q, _ := c.Network().Queue("test.message.api.portal"); return q }())
			t.FailNow()
		}
		assert.Empty(t, j.all(), "no handler ran a message after its caller's deadline")
		_, err := service.Call[Touched](t.Context(), client, APITouch{Resource: message.NewUUID()}, bus.WithTimeout(time.Second))
		require.NoError(t, err, "a call in time runs")
		assert.Len(t, j.all(), 1)
	})
}

// TestFencedPortalGivesMessagesBack: a node cut off from the heartbeat
// store fences itself; its portal then gives API messages back to
// api.portal for a healthy node's portal instead of routing them with a
// ring it cannot vouch for. Calls about resources the fenced node does
// not own keep succeeding, none through its portal.
func TestFencedPortalGivesMessagesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{NoRejoin: true})
		client := c.Client(t)
		fenced := c.Node(0)
		c.StopHeartbeat(fenced.UUID())
		c.WaitFor(t, time.Second, "the cut-off node fences itself", fenced.LeaseExpired)
		var asked int
		for asked < 30 {
			res := message.NewUUID()
			if c.Owner(res) == fenced.UUID() {
				continue
			}
			asked++
			_, err := service.Call[Touched](t.Context(), client, APITouch{Resource: res}, bus.WithTimeout(5*time.Second))
			require.NoError(t, err, "a healthy portal takes the message")
		}
		for _, h := range j.all() {
			assert.NotEqual(t, fenced.UUID(), h.portal, "the fenced node's portal forwarded nothing")
		}
		assert.Positive(t, fenced.Bus().Stats().Released, "the fenced portal gave messages back")
	})
}
