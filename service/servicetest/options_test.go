package servicetest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

// TestOptionsHeartbeatMerge: Options.Heartbeat is merged with
// heartbeat.TestConfig() field by field; Lease and OpTimeout come from
// TestConfig only when the timing they fit is TestConfig's, and
// otherwise stay zero for heartbeat to derive; an invalid result is an
// error from New.
func TestOptionsHeartbeatMerge(t *testing.T) {
	local := heartbeat.TestConfig()
	for _, tc := range []struct {
		name    string
		in      heartbeat.Config
		want    heartbeat.Config // Now is not compared
		wantErr string           // from heartbeat.Config.Validate
	}{
		{name: "zero is TestConfig", want: local},
		{
			name: "only EvictAfter: Lease derived from it, not TestConfig's",
			in:   heartbeat.Config{EvictAfter: time.Second},
			want: heartbeat.Config{Interval: local.Interval, EvictAfter: time.Second},
		},
		{
			name: "only EvictAfter, below TestConfig's Lease",
			in:   heartbeat.Config{EvictAfter: 200 * ms},
			want: heartbeat.Config{Interval: local.Interval, EvictAfter: 200 * ms},
		},
		{
			name: "only Interval",
			in:   heartbeat.Config{Interval: 100 * ms},
			want: heartbeat.Config{Interval: 100 * ms, EvictAfter: local.EvictAfter},
		},
		{
			name: "Interval and EvictAfter",
			in:   heartbeat.Config{Interval: time.Second, EvictAfter: 5 * time.Second},
			want: heartbeat.Config{Interval: time.Second, EvictAfter: 5 * time.Second},
		},
		{
			name: "only Lease: the rest from TestConfig",
			in:   heartbeat.Config{Lease: 250 * ms},
			want: heartbeat.Config{Interval: local.Interval, EvictAfter: local.EvictAfter, Lease: 250 * ms, OpTimeout: local.OpTimeout},
		},
		{
			name: "every field given is kept",
			in:   heartbeat.Config{Interval: 10 * ms, EvictAfter: 100 * ms, Lease: 50 * ms, OpTimeout: 5 * ms},
			want: heartbeat.Config{Interval: 10 * ms, EvictAfter: 100 * ms, Lease: 50 * ms, OpTimeout: 5 * ms},
		},
		{
			name:    "invalid: only Interval, too long for TestConfig's EvictAfter",
			in:      heartbeat.Config{Interval: 200 * ms},
			want:    heartbeat.Config{Interval: 200 * ms, EvictAfter: local.EvictAfter},
			wantErr: "EvictAfter 300ms must be at least twice Interval 200ms",
		},
		{
			name:    "invalid: a Lease below the interval",
			in:      heartbeat.Config{Lease: 10 * ms},
			want:    heartbeat.Config{Interval: local.Interval, EvictAfter: local.EvictAfter, Lease: 10 * ms, OpTimeout: local.OpTimeout},
			wantErr: "Lease 10ms must lie between Interval 50ms and EvictAfter-Interval 250ms",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := servicetest.MergeHeartbeat(tc.in)
			got.Now = nil
			assert.Equal(t, tc.want, got)
			if tc.wantErr == "" {
				require.NoError(t, got.Validate())
				return
			}
			c, err := servicetest.New(context.Background(), servicetest.Options{Heartbeat: tc.in})
			require.Error(t, err, "New must refuse the merged timing")
			assert.Nil(t, c)
			assert.ErrorContains(t, err, tc.wantErr)
			assert.ErrorContains(t, err, "Options.Heartbeat, merged with heartbeat.TestConfig()")
		})
	}
}

func TestOptionsHeartbeatNowKept(t *testing.T) {
	called := false
	got := servicetest.MergeHeartbeat(heartbeat.Config{Now: func() time.Time { called = true; return time.Time{} }})
	require.NotNil(t, got.Now)
	got.Now()
	assert.True(t, called)
}

// TestOptionsOnlyEvictAfterIsHonoured: a cluster given only EvictAfter
// evicts after that threshold, not after TestConfig's.
func TestOptionsOnlyEvictAfterIsHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const evictAfter = time.Second
		interval := heartbeat.TestConfig().Interval
		c := start(t, 3, servicetest.Options{Heartbeat: heartbeat.Config{EvictAfter: evictAfter}})
		victim := c.Node(1).UUID()
		stopped := time.Now()
		c.StopHeartbeat(victim)
		c.WaitGone(t, victim, evictAfter+2*interval)
		took := time.Since(stopped)
		assert.Greater(t, took, evictAfter-interval, "evicted after the given EvictAfter, not TestConfig's 300 ms")
		assert.LessOrEqual(t, took, evictAfter+interval)
	})
}

func TestOptionsInvalid(t *testing.T) {
	_, err := servicetest.New(context.Background(), servicetest.Options{Nodes: -1, Heartbeat: heartbeat.Config{Interval: -ms}})
	assert.ErrorContains(t, err, "Options.Nodes -1 is negative")
	assert.ErrorContains(t, err, "durations must not be negative", "every problem is reported at once")
}
