package sqlstore_test

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/sqlgolden"
)

// The golden state: the heartbeat tables of a small cluster, as the
// store keeps them. The golden files (testdata/golden/v<N>.sql) hold it
// in every schema version's form; see package internal/sqlgolden for
// the format and TestGolden for what is checked.
const (
	// goldenTable is the placeholder table name of the golden files.
	goldenTable = "golden_heartbeat"

	// goldenLive beats, and reports the bus up.
	goldenLive = "1a0e5b9c2d7f4e8a9b3c6d1e0f2a4b01"
	// goldenBusDown beats, and reports the bus down (schema version 2).
	goldenBusDown = "2b1f6c0d3e8a4f9b8c4d7e2f1a3b5c02"
	// goldenStale registered and never beat again: peers would evict it.
	goldenStale = "3c2a7d1e4f9b4a0c9d5e8f3a2b4c6d03"
	// goldenEvicted was evicted: its record is gone, its queues stay for
	// a survivor to drain (schema version 2).
	goldenEvicted = "4d3b8e2f5a0c4b1d8e6f9a4b3c5d7e04"
	// goldenLeft forgot its queues and deregistered: nothing of it stays.
	goldenLeft = "5e4c9f3a6b1d4c2e9f7a0b5c4d6e8f05"
)

// goldenQueue returns the queue of service on node, as package bus names
// it.
func goldenQueue(service, node string) string { return "cloudbus.message." + service + "." + node }

// TestGolden keeps the heartbeat tables of every schema version readable:
// each golden file testdata/golden/v<N>.sql is loaded into a new SQLite
// database, the store opens it with today's code (migrating it), and
// every record and queue is read back through the store and compared
// with the values written below; then the store must go on working on
// those rows (beat, evict, register). Subtest "current" checks that
// today's code creates the tables of the newest file and writes the
// golden state as it says. After a schema change (a new migration), run
//
//	go test ./heartbeat/sqlstore -run TestGolden -update-golden
//
// which writes the new version's file; keep the old ones.
func TestGolden(t *testing.T) {
	t.Parallel()
	sqlgolden.Run(t, sqlgolden.Store{
		Pkg:    "./heartbeat/sqlstore",
		Tables: []string{goldenTable, goldenTable + "_meta", goldenTable + "_queues"},
		Meta:   goldenTable + "_meta",
		Open: func(t *testing.T, p *sqlconn.Pool, url string) io.Closer {
			s, err := sqlstore.OpenDB(t.Context(), p.DB, sqlstore.Config{URL: url, Table: goldenTable})
			require.NoError(t, err, "today's store must open (and migrate) the tables")
			return s
		},
		Write: writeHeartbeatGolden,
		Check: checkHeartbeatGolden,
	})
}

// writeHeartbeatGolden writes the golden state with a real store of
// today's code and returns the golden file's header. Values that come
// from the database's clock (epochs, beat and bus-down stamps, the last
// epoch) are then pinned to fixed ones, so the file does not change from
// run to run.
func writeHeartbeatGolden(t *testing.T, p *sqlconn.Pool, url string) []string {
	ctx := t.Context()
	s, err := sqlstore.OpenDB(ctx, p.DB, sqlstore.Config{URL: url, Table: goldenTable})
	require.NoError(t, err)
	defer s.Close()

	register := func(node string) int64 {
		e, err := s.Register(ctx, node)
		require.NoError(t, err)
		return e
	}
	e := register(goldenLive)
	for range 3 {
		require.NoError(t, s.Beat(ctx, goldenLive, e))
	}
	require.NoError(t, s.BeatBus(ctx, goldenLive, e, true))
	require.NoError(t, s.AddQueues(ctx, goldenLive, []string{goldenQueue("vmInstance", goldenLive), goldenQueue("cloudbus-membership", goldenLive)}))

	e = register(goldenBusDown)
	require.NoError(t, s.BeatBus(ctx, goldenBusDown, e, false))
	require.NoError(t, s.BeatBus(ctx, goldenBusDown, e, false))
	require.NoError(t, s.AddQueues(ctx, goldenBusDown, []string{goldenQueue("cloudbus-membership", goldenBusDown)}))

	register(goldenStale)

	e = register(goldenEvicted)
	require.NoError(t, s.AddQueues(ctx, goldenEvicted, []string{goldenQueue("cloudbus-membership", goldenEvicted), goldenQueue("host", goldenEvicted)}))
	evicted, err := s.Evict(ctx, goldenEvicted, e, 0)
	require.NoError(t, err)
	require.True(t, evicted)

	e = register(goldenLeft)
	require.NoError(t, s.AddQueues(ctx, goldenLeft, []string{goldenQueue("host", goldenLeft)}))
	require.NoError(t, s.RemoveQueues(ctx, goldenLeft, []string{goldenQueue("host", goldenLeft)}))
	require.NoError(t, s.Deregister(ctx, goldenLeft, e))

	// The clock's values, pinned: microseconds since 1970. The last
	// epoch is ahead of every clock, as after the database's clock went
	// back: the next epoch is the last one plus 1.
	for _, q := range []string{
		`UPDATE "golden_heartbeat" SET epoch = 1748779200000000, beat_us = 1748779230500000 WHERE node = '` + goldenLive + `'`,
		`UPDATE "golden_heartbeat" SET epoch = 1748779201000000, beat_us = 1748779229000000, bus_down_us = 1748779215250000 WHERE node = '` + goldenBusDown + `'`,
		`UPDATE "golden_heartbeat" SET epoch = 1748779202000000, beat_us = 1748779202000000 WHERE node = '` + goldenStale + `'`,
		`UPDATE "golden_heartbeat_meta" SET last_epoch = 4102444800000000`,
	} {
		_, err := p.DB.ExecContext(ctx, q)
		require.NoError(t, err)
	}

	return []string{
		fmt.Sprintf("Golden file of heartbeat/sqlstore: schema version %d, as today's code stores it in SQLite.", sqlstore.SchemaVersion),
		"Written by a real store (writeHeartbeatGolden in golden_test.go), the database clock's values pinned, with",
		"\tgo test ./heartbeat/sqlstore -run TestGolden -update-golden",
		"Do not edit, and keep it forever: TestGolden loads it, opens the store on it and reads every row back.",
	}
}

// goldenRecord is a record of the golden state as the store must read
// it: its last beat and bus-down stamp give the ages List reports.
type goldenRecord struct {
	node        string
	epoch, seq  int64
	beat        time.Time
	busDownFrom time.Time // zero: the bus is up, unless busDownNow
	busDownNow  bool      // the bus is down since just now
}

// checkHeartbeatGolden opens a store of today's code on p's database, a
// golden file of schema version v, and reads it back.
func checkHeartbeatGolden(t *testing.T, v int, p *sqlconn.Pool, url string) {
	ctx := t.Context()
	s, err := sqlstore.OpenDB(ctx, p.DB, sqlstore.Config{URL: url, Table: goldenTable})
	require.NoError(t, err, "today's store must open (and migrate) tables of schema version %d", v)
	defer func() { assert.NoError(t, s.Close()) }()

	// Written by hand, not derived from the generator: what the rows
	// mean. Epochs and stamps are microseconds since 1970, UTC.
	want := []goldenRecord{
		{node: goldenLive, epoch: 1748779200000000, seq: 4, beat: time.Date(2025, 6, 1, 12, 0, 30, 500_000_000, time.UTC)},
		{node: goldenBusDown, epoch: 1748779201000000, seq: 2, beat: time.Date(2025, 6, 1, 12, 0, 29, 0, time.UTC),
			busDownFrom: time.Date(2025, 6, 1, 12, 0, 15, 250_000_000, time.UTC)},
		{node: goldenStale, epoch: 1748779202000000, seq: 0, beat: time.Date(2025, 6, 1, 12, 0, 2, 0, time.UTC)},
	}
	wantQueues := map[string][]string{
		goldenLive:    {"cloudbus.message.cloudbus-membership." + goldenLive, "cloudbus.message.vmInstance." + goldenLive},
		goldenBusDown: {"cloudbus.message.cloudbus-membership." + goldenBusDown},
		goldenEvicted: {"cloudbus.message.cloudbus-membership." + goldenEvicted, "cloudbus.message.host." + goldenEvicted},
	}
	const lastEpoch = 4102444800000000 // 2100-01-01
	if v < 2 {
		// Version 1 had no bus status and no queue book: the migration
		// reports every bus up and no queues.
		for i := range want {
			want[i].busDownFrom = time.Time{}
		}
		wantQueues = map[string][]string{}
	}

	checkGoldenRecords(t, s, want, "")

	queues, err := s.Queues(ctx)
	require.NoError(t, err)
	assert.Equal(t, wantQueues, queues, "Queues must read every golden queue, by node, an evicted node's included")

	// The rows go on working with today's code.
	require.NoError(t, s.Beat(ctx, goldenLive, 1748779200000000), "a golden record beats with its epoch")
	want[0].seq, want[0].beat = 5, time.Time{}
	require.NoError(t, s.BeatBus(ctx, goldenBusDown, 1748779201000000, false), "a golden record beats with its epoch")
	want[1].seq, want[1].beat = 3, time.Time{}
	// A down beat keeps the first down stamp; on a record migrated from
	// version 1 it is the first.
	want[1].busDownNow = v < 2
	checkGoldenRecords(t, s, want, "after a beat of each: ")

	err = s.Beat(ctx, goldenStale, 1748779200000000)
	assert.ErrorIs(t, err, heartbeat.ErrEvicted, "a beat with another node's epoch must find no record")
	ok, err := s.Evict(ctx, goldenStale, 1748779202000000, 0)
	require.NoError(t, err)
	assert.True(t, ok, "the stale golden record is evicted by its epoch and sequence")
	err = s.Beat(ctx, goldenStale, 1748779202000000)
	assert.ErrorIs(t, err, heartbeat.ErrEvicted)

	e, err := s.Register(ctx, goldenLeft)
	require.NoError(t, err)
	assert.Equal(t, int64(lastEpoch+1), e, "the next epoch follows the golden meta row's last epoch")
}

// checkGoldenRecords lists the store and compares it with want: nodes,
// epochs and sequences exactly, ages and bus-down times by the database's
// clock read before and after. A zero beat means "just now".
func checkGoldenRecords(t *testing.T, s *sqlstore.Store, want []goldenRecord, what string) {
	t.Helper()
	ctx := t.Context()
	before, res, err := s.StoreTime(ctx)
	require.NoError(t, err)
	recs, err := s.List(ctx)
	require.NoError(t, err)
	after, _, err := s.StoreTime(ctx)
	require.NoError(t, err)

	var gotIDs, wantIDs []string
	for _, r := range recs {
		gotIDs = append(gotIDs, fmt.Sprintf("%s epoch %d seq %d", r.Node, r.Epoch, r.Seq))
	}
	for _, w := range want {
		wantIDs = append(wantIDs, fmt.Sprintf("%s epoch %d seq %d", w.node, w.epoch, w.seq))
	}
	require.Equal(t, wantIDs, gotIDs, "%sList must read every golden record: node, epoch, sequence", what)
	for i, w := range want {
		r := recs[i]
		if w.beat.IsZero() {
			assert.Less(t, r.Age, time.Minute, "%s%s: age since the beat just now", what, w.node)
		} else {
			goldenWithin(t, r.Age, w.beat, before, after, res, fmt.Sprintf("%s%s: age (beat_us is the last beat, in microseconds since 1970)", what, w.node))
		}
		switch {
		case w.busDownNow:
			assert.Positive(t, r.BusDown, "%s%s: the bus is down", what, w.node)
			assert.Less(t, r.BusDown, time.Minute, "%s%s: since the down beat just now", what, w.node)
		case w.busDownFrom.IsZero():
			assert.Zero(t, r.BusDown, "%s%s: the bus is up", what, w.node)
		default:
			goldenWithin(t, r.BusDown, w.busDownFrom, before, after, res, fmt.Sprintf("%s%s: bus down since the first down beat (bus_down_us)", what, w.node))
		}
	}
}

// goldenWithin asserts that got is the time from stamp to a moment between
// before and after, give or take the clock's resolution.
func goldenWithin(t *testing.T, got time.Duration, stamp, before, after time.Time, res time.Duration, what string) {
	t.Helper()
	lo, hi := before.Sub(stamp)-res, after.Sub(stamp)+res
	assert.True(t, got >= lo && got <= hi, "%s: got %s, want between %s and %s (the database's clock less %s)", what, got, lo, hi, stamp.Format(time.RFC3339Nano))
}
