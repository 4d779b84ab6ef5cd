package nodekit

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
)

// TestBeatStats: GET /status's beats: totals since the start, runs of
// failures, and the durations of the beats within the window only.
func TestBeatStats(t *testing.T) {
	var b beatStats
	now := time.Now()
	b.add(now.Add(-time.Minute), 900*time.Millisecond, true) // outside the window
	for i := range 100 {
		b.add(now.Add(-10*time.Second+time.Duration(i)*time.Millisecond), time.Duration(i+1)*time.Millisecond, false)
	}
	b.add(now, 500*time.Millisecond, true)
	b.add(now, 501*time.Millisecond, true)
	st := b.status(now)
	assert.Equal(t, uint64(103), st.Total)
	assert.Equal(t, uint64(3), st.TotalFailed)
	assert.Equal(t, 2, st.FailingNow)
	assert.Equal(t, 2, st.MostFailedInARow)
	assert.Equal(t, 102, st.Count, "the beat a minute ago is outside the window")
	assert.Equal(t, 2, st.Failed)
	assert.Equal(t, 51.0, st.P50MS)
	assert.Equal(t, 100.0, st.P99MS)
	assert.Equal(t, 501.0, st.MaxMS)

	b.add(now, time.Millisecond, false)
	st = b.status(now)
	assert.Equal(t, 0, st.FailingNow, "a beat that succeeds ends the run")
	assert.Equal(t, 2, st.MostFailedInARow)

	assert.Zero(t, (&beatStats{}).status(now).Count, "no beats: an empty summary")
}

// TestDatabaseStatus: GET /status's database section names each pool's
// cap and use.
func TestDatabaseStatus(t *testing.T) {
	d, err := OpenDatabase(t.Context(), DatabaseConfig{URL: "sqlite:" + filepath.Join(t.TempDir(), "node.db"), HeartbeatTable: "hb", EvictAfter: 3 * time.Second})
	require.NoError(t, err)
	defer d.Close()
	c, err := d.DB().Conn(t.Context())
	require.NoError(t, err)
	defer c.Close()
	st := newAdmin(nil, "p", time.Now(), d, &beatStats{}).dbStatus()
	assert.Equal(t, HeartbeatConns, st.Heartbeat.MaxOpen)
	assert.Equal(t, ServiceConns, st.Records.MaxOpen)
	assert.Equal(t, 1, st.Records.InUse)
	assert.Zero(t, st.Heartbeat.InUse)
}

// TestTimedKeepsSessionLocks: timing a store's beats keeps its session
// locks visible to the monitor, and adds none to a store without them.
func TestTimedKeepsSessionLocks(t *testing.T) {
	beats := &beatStats{}
	locking := timed(memstore.New(memstore.Config{}), beats)
	l, ok := locking.(heartbeat.SessionLocker)
	require.True(t, ok, "a store with session locks keeps them")
	h, err := l.HoldSession(t.Context(), "node")
	require.NoError(t, err)
	free, err := l.SessionFree(t.Context(), "node")
	require.NoError(t, err)
	assert.False(t, free)
	require.NoError(t, h.Release())

	_, ok = timed(plainStore{locking}, beats).(heartbeat.SessionLocker)
	assert.False(t, ok, "a store without session locks gets none")
}

// plainStore hides every method but heartbeat.Store's.
type plainStore struct{ heartbeat.Store }
