package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// queues returns the recorded queues of nodes, by node.
func (e *env) queues(nodes ...string) map[string][]string {
	e.t.Helper()
	all, err := e.s.Queues(e.ctx())
	require.NoError(e.t, err, "Queues must succeed")
	out := make(map[string][]string)
	for _, n := range nodes {
		if qs, ok := all[n]; ok {
			out[n] = qs
		}
	}
	return out
}

// without returns names less drop, in a new slice.
func without(names []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(drop, n) })
}

func testQueues(e *env) {
	ctx := e.ctx()
	a, b, never := node(), node(), node()
	// Names compare byte for byte: case, a trailing space and non-ASCII
	// bytes all make another queue; 255 bytes is RabbitMQ's longest name.
	qa := []string{"cloudbus." + a + ".inbox", "cloudbus." + a + ".events", "q", "Q", "q ", "über", strings.Repeat("x", 255)}
	qbs := []string{"cloudbus." + b + ".inbox", "q"}

	require.NoError(e.t, e.s.AddQueues(ctx, a, qa), "AddQueues must succeed")
	require.NoError(e.t, e.s.AddQueues(ctx, a, qa[:3]), "AddQueues of names already recorded is a no-op, not an error")
	require.NoError(e.t, e.s.AddQueues(ctx, a, []string{qa[0], qa[0]}), "a name repeated in one AddQueues is recorded once")
	require.NoError(e.t, e.s.AddQueues(ctx, a, nil), "AddQueues of no names is a no-op")
	require.NoError(e.t, e.s.AddQueues(ctx, b, qbs))
	got := e.queues(a, b, never)
	require.ElementsMatch(e.t, qa, got[a], "Queues must return every name added for the node, once each; names compare byte for byte ('q', 'Q' and 'q ' are three queues)")
	require.ElementsMatch(e.t, qbs, got[b], "Queues must return every name added for each node")
	assert.Empty(e.t, got[never], "a node that recorded nothing has no queues")

	got[a][0] = "changed by the caller"
	delete(got, b)
	got = e.queues(a, b)
	assert.ElementsMatch(e.t, qa, got[a], "the caller owns the map and slices Queues returns: changing them must not change the store")
	assert.ElementsMatch(e.t, qbs, got[b], "the caller owns the map Queues returns")

	// Queues are a node's, not a record's: survivors drain the queues of
	// a node after evicting it, and a node that rejoins has the same.
	epoch := e.register(a)
	ok, err := e.s.Evict(ctx, a, epoch, 0)
	require.NoError(e.t, err)
	require.True(e.t, ok, "Evict with the listed epoch and sequence must delete")
	assert.ElementsMatch(e.t, qa, e.queues(a)[a], "evicting a node's record must keep its queues, for survivors to drain")
	epoch = e.register(a)
	require.NoError(e.t, e.s.Deregister(ctx, a, epoch))
	assert.ElementsMatch(e.t, qa, e.queues(a)[a], "registering and deregistering a node must keep its queues")

	require.NoError(e.t, e.s.RemoveQueues(ctx, a, []string{"q", "cloudbus." + b + ".inbox", "never-recorded"}),
		"RemoveQueues must succeed, names not recorded for the node included")
	got = e.queues(a, b)
	left := without(qa, "q")
	assert.ElementsMatch(e.t, left, got[a], "RemoveQueues must remove exactly the named queues of the node: 'q', not 'Q' nor 'q '")
	assert.ElementsMatch(e.t, qbs, got[b], "RemoveQueues of one node must not remove another node's queues, even of the same name")
	require.NoError(e.t, e.s.RemoveQueues(ctx, never, qa), "RemoveQueues of a node with no queues is a no-op, not an error")
	require.NoError(e.t, e.s.RemoveQueues(ctx, a, []string{"q"}), "RemoveQueues of a name already removed is a no-op, not an error")
	require.NoError(e.t, e.s.RemoveQueues(ctx, a, nil), "RemoveQueues of no names is a no-op")
	require.NoError(e.t, e.s.RemoveQueues(ctx, b, qbs))
	got = e.queues(a, b, never)
	assert.ElementsMatch(e.t, left, got[a], "no-op removals must change nothing")
	assert.Empty(e.t, got[b], "a node whose queues were all removed has none")
	assert.Empty(e.t, got[never], "RemoveQueues must not create anything")

	// A long list, as a node with many queues declares them.
	c := node()
	many := make([]string, 1200)
	for i := range many {
		many[i] = fmt.Sprintf("cloudbus.%s.q%04d", c, i)
	}
	require.NoError(e.t, e.s.AddQueues(ctx, c, many), "AddQueues of %d names", len(many))
	listed := slices.Clone(e.queues(c)[c])
	slices.Sort(listed)
	assert.Equal(e.t, many, listed, "AddQueues must record every name of a long list") // many is sorted
	require.NoError(e.t, e.s.RemoveQueues(ctx, c, many[1:]), "RemoveQueues of %d names", len(many)-1)
	assert.Equal(e.t, many[:1], e.queues(c)[c], "RemoveQueues must remove every name of a long list")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	for _, d := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		require.ErrorIs(e.t, e.s.AddQueues(d.ctx, a, []string{"added-with-a-done-context"}), d.want, "AddQueues with a done context")
		require.ErrorIs(e.t, e.s.RemoveQueues(d.ctx, a, left), d.want, "RemoveQueues with a done context")
		_, err := e.s.Queues(d.ctx)
		require.ErrorIs(e.t, err, d.want, "Queues with a done context")
		require.ElementsMatch(e.t, left, e.queues(a)[a], "AddQueues and RemoveQueues with a done context must change nothing")
	}

	// Leave the shared store as found.
	require.NoError(e.t, e.s.RemoveQueues(ctx, a, left))
	require.NoError(e.t, e.s.RemoveQueues(ctx, c, many[:1]))
	assert.Empty(e.t, e.queues(a, c))
}

// testQueuesConcurrent runs AddQueues and RemoveQueues of several nodes
// at once, with names that overlap and arrive in different orders, as
// nodes that start, restart and drain together do: no call may fail, and
// the outcome is the one the calls imply.
func testQueuesConcurrent(e *env) {
	ctx := e.ctx()
	const nodes, writers, rounds, names = 4, 3, 10, 30
	ns := make([]string, nodes)
	keep := make([][]string, nodes) // added by every writer, every round
	drop := make([][]string, nodes) // added first, removed during the race
	for i := range ns {
		ns[i] = node()
		for j := range names {
			keep[i] = append(keep[i], fmt.Sprintf("cloudbus.%s.keep%02d", ns[i], j))
			drop[i] = append(drop[i], fmt.Sprintf("cloudbus.%s.drop%02d", ns[i], j))
		}
		require.NoError(e.t, e.s.AddQueues(ctx, ns[i], drop[i]))
	}

	var (
		wg     sync.WaitGroup
		failMu sync.Mutex
		fails  []string
	)
	fail := func(format string, args ...any) {
		failMu.Lock()
		fails = append(fails, fmt.Sprintf(format, args...))
		failMu.Unlock()
	}
	start := make(chan struct{})
	for i, n := range ns {
		for w := range writers {
			wg.Go(func() {
				<-start
				for r := range rounds {
					batch := slices.Clone(keep[i])
					if (w+r)%2 == 1 {
						slices.Reverse(batch)
					}
					if err := e.s.AddQueues(ctx, n, batch); err != nil {
						fail("concurrent AddQueues must succeed, got %v", err)
						return
					}
				}
			})
		}
		wg.Go(func() {
			<-start
			for j := range drop[i] {
				if err := e.s.RemoveQueues(ctx, n, drop[i][j:j+1]); err != nil {
					fail("concurrent RemoveQueues must succeed, got %v", err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	require.Empty(e.t, fails, "concurrent use broke the queue book's rules")
	got := e.queues(ns...)
	for i, n := range ns {
		assert.ElementsMatch(e.t, keep[i], got[n], "after concurrent writes node %s must have every name added and none removed", n)
		require.NoError(e.t, e.s.RemoveQueues(ctx, n, keep[i]))
	}
}
