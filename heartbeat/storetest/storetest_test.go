package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/heartbeat/storetest"
)

// childVar names the store TestSuiteChild runs the suite on, in a child
// process of TestSuiteCatches.
const childVar = "CLOUDBUS_STORETEST_CHILD"

// clock is a manual clock for the in-memory store.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// restamp stamps a new outage with every down beat.
type restamp struct{ *memstore.Store }

func (r restamp) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	if !busUp {
		if err := r.Store.BeatBus(ctx, node, epoch, true); err != nil {
			return err
		}
	}
	return r.Store.BeatBus(ctx, node, epoch, busUp)
}

// caseFold records queue names in lower case, as a case-insensitive
// collation would compare them.
type caseFold struct{ *memstore.Store }

func (c caseFold) AddQueues(ctx context.Context, node string, queues []string) error {
	lower := make([]string, len(queues))
	for i, q := range queues {
		lower[i] = strings.ToLower(q)
	}
	return c.Store.AddQueues(ctx, node, lower)
}

// evictQueues forgets a node's queues with its record.
type evictQueues struct{ *memstore.Store }

func (s evictQueues) Evict(ctx context.Context, node string, epoch, seq int64) (bool, error) {
	ok, err := s.Store.Evict(ctx, node, epoch, seq)
	if ok {
		qs, _ := s.Store.Queues(ctx)
		_ = s.Store.RemoveQueues(ctx, node, qs[node])
	}
	return ok, err
}

// TestSuiteChild runs the suite on the store childVar names; run alone it
// skips.
func TestSuiteChild(t *testing.T) {
	kind := os.Getenv(childVar)
	if kind == "" {
		t.Skip("a child process of TestSuiteCatches")
	}
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) heartbeat.Store {
			s := memstore.New(memstore.Config{Now: c.Now})
			switch kind {
			case "restamp":
				return restamp{s}
			case "casefold":
				return caseFold{s}
			case "evictqueues":
				return evictQueues{s}
			}
			t.Fatalf("unknown store %q", kind)
			return nil
		},
		Advance: func(t *testing.T, d time.Duration) { c.Advance(d) },
	})
}

// TestSuiteCatches runs scenarios of the suite, in child processes, on
// stores that break a rule: the scenario fails naming the rule.
func TestSuiteCatches(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	for _, c := range []struct {
		store, scenario, want string
	}{
		{"restamp", "bus_status_is_recorded_with_beats", "a further BeatBus(down) must keep the stamp of the first"},
		{"casefold", "queues_are_recorded_per_node", "names compare byte for byte"},
		{"evictqueues", "queues_are_recorded_per_node", "evicting a node's record must keep its queues"},
	} {
		t.Run(c.store+"/"+c.scenario, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSuiteChild$/^"+c.scenario+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), childVar+"="+c.store)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the suite must fail on store %s:\n%s", c.store, out)
			assert.Contains(t, string(out), "--- FAIL: TestSuiteChild/"+c.scenario, "the scenario's verdict")
			assert.Contains(t, string(out), c.want, "the message names the rule")
		})
	}
}
