package main

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// TestBeatsDoNotWaitForRecords: with every connection of the record
// store's pool held in an open transaction, the heartbeat store of the
// same node still beats, lists the members and reads the clock, each
// within the heartbeat's timeout (issue 23: a pool shared by both
// stores starved the beats and the node was evicted). As a control, a
// heartbeat store on the record pool, as refnode serve had it, times
// out under the same hold: the hold is real.
func TestBeatsDoNotWaitForRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "refnode.db") }},
		{"postgres", func(t *testing.T) string { return testenv.PostgresDSN(t) }},
		{"mysql", func(t *testing.T) string { return testenv.MySQLDSN(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			beatsDoNotWaitForRecords(t, tc.url(t))
		})
	}
}

func beatsDoNotWaitForRecords(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	hbCfg := heartbeat.DefaultConfig()
	base := "storestest_" + strings.ToLower(message.NewUUID()[:12])
	s, err := openStores(ctx, url, hbCfg.EvictAfter, base+"_heartbeat", base+"_refnode", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() {
		dropStores(t, s)
		s.close(slog.New(slog.DiscardHandler))
	})
	require.NotSame(t, s.hbPool, s.recPool, "each store has its own pool")
	assert.Equal(t, heartbeatConns, s.hbPool.DB.Stats().MaxOpenConnections)
	assert.Equal(t, recordConns, s.recPool.DB.Stats().MaxOpenConnections)
	node := message.NewUUID()
	epoch, err := s.hb.Register(ctx, node)
	require.NoError(t, err)
	// The control: a heartbeat store on the record pool, as refnode
	// serve had it.
	shared, err := sqlstore.OpenDB(ctx, s.recPool.DB, sqlstore.Config{URL: url, Table: s.hb.Table()})
	require.NoError(t, err)

	// Every record connection in an open transaction that has read a
	// record table (read only, so that SQLite's need not be the file's
	// one writer: the records' writes are not what this test holds).
	release := holdEvery(t, ctx, s.recPool.DB, recordConns, "SELECT COUNT(*) FROM "+sqlconn.QuoteIdent(s.recPool.URL.Dialect, s.records.Tables()[0]))
	defer release()
	busy, cancelBusy := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = s.records.VM(busy, message.NewUUID())
	cancelBusy()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the record pool is exhausted: a record read waits for a connection")

	var slowest time.Duration
	within := func(what string, op func(ctx context.Context) error) {
		t.Helper()
		opCtx, cancel := context.WithTimeout(ctx, hbCfg.OpTimeout)
		defer cancel()
		start := time.Now()
		require.NoError(t, op(opCtx), "%s while every record connection is busy: within the heartbeat's timeout %s", what, hbCfg.OpTimeout)
		slowest = max(slowest, time.Since(start))
	}
	for range 3 {
		within("beat", func(ctx context.Context) error { return s.hb.BeatBus(ctx, node, epoch, true) })
		within("list the members", func(ctx context.Context) error {
			recs, err := s.hb.List(ctx)
			if err == nil && len(recs) != 1 {
				err = errors.New("the node's record is missing")
			}
			return err
		})
		within("read the clock", func(ctx context.Context) error { _, _, err := s.hb.StoreTime(ctx); return err })
	}
	t.Logf("with all %d record connections busy, the slowest heartbeat statement took %s", recordConns, slowest.Round(time.Microsecond))

	opCtx, cancelOp := context.WithTimeout(ctx, hbCfg.OpTimeout)
	err = shared.Beat(opCtx, node, epoch)
	cancelOp()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a heartbeat store on the busy record pool times out: the hold is real")
}

// TestBeatsDuringFencedTransactions measures a beat sent while a fenced
// transaction of the same node is open (package fence, "Writes, not
// liveness"). On PostgreSQL, MySQL and MariaDB the fence's check takes no
// lock on the heartbeat record (its transactions run at READ COMMITTED):
// the beat must land within its timeout. On SQLite any writing
// transaction holds the file's write lock: there the beat waits for the
// transaction, which this test only reports (the documented limit).
func TestBeatsDuringFencedTransactions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		url   func(t *testing.T) string
		waits bool // the beat waits for the transaction: report only
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "refnode.db") }, true},
		{"postgres", func(t *testing.T) string { return testenv.PostgresDSN(t) }, false},
		{"mysql", func(t *testing.T) string { return testenv.MySQLDSN(t) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			hbCfg := heartbeat.DefaultConfig()
			base := "storestest_" + strings.ToLower(message.NewUUID()[:12])
			s, err := openStores(ctx, tc.url(t), hbCfg.EvictAfter, base+"_heartbeat", base+"_refnode", slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			t.Cleanup(func() {
				dropStores(t, s)
				s.close(slog.New(slog.DiscardHandler))
			})
			node := message.NewUUID()
			epoch, err := s.hb.Register(ctx, node)
			require.NoError(t, err)

			inTx, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				_, err := s.records.Do(ctx, fence.Guard{Claim: fence.Claim{Resource: message.NewUUID(), Node: node, Epoch: epoch}},
					func(ctx context.Context, tx cloud.Store) ([]byte, error) {
						close(inTx)
						<-release
						return nil, nil
					})
				done <- err
			}()
			select {
			case <-inTx:
			case err := <-done:
				t.Fatalf("the fenced transaction ended before its function ran: %v", err)
			}
			opCtx, cancelOp := context.WithTimeout(ctx, hbCfg.OpTimeout)
			start := time.Now()
			err = s.hb.Beat(opCtx, node, epoch)
			took := time.Since(start)
			cancelOp()
			close(release)
			require.NoError(t, <-done, "the fenced transaction commits")
			if tc.waits {
				t.Logf("%s: a beat sent while a fenced transaction of its node was open: %v after %s (it waits for the transaction: see package fence)",
					tc.name, err, took.Round(time.Millisecond))
				return
			}
			require.NoError(t, err, "a beat while a fenced transaction of its node is open lands within the heartbeat's timeout %s", hbCfg.OpTimeout)
			t.Logf("%s: a beat sent while a fenced transaction of its node was open took %s", tc.name, took.Round(time.Microsecond))
		})
	}
}

// holdEvery takes n connections of db, each in an open read-only
// transaction that has run query, until the returned release is called
// (or the test ends).
func holdEvery(t *testing.T, ctx context.Context, db *sql.DB, n int, query string) (release func()) {
	t.Helper()
	var txs []*sql.Tx
	release = func() {
		for _, tx := range txs {
			_ = tx.Rollback()
		}
		txs = nil
	}
	t.Cleanup(release)
	for range n {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		require.NoError(t, err)
		txs = append(txs, tx)
		var count int64
		require.NoError(t, tx.QueryRowContext(ctx, query).Scan(&count))
	}
	require.Equal(t, n, db.Stats().InUse, "every connection of the pool is held")
	return release
}

// dropStores drops the stores' tables.
func dropStores(t *testing.T, s *nodeStores) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, table := range s.records.Tables() {
		_, err := s.recPool.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+sqlconn.QuoteIdent(s.recPool.URL.Dialect, table))
		assert.NoError(t, err, "drop table %s", table)
	}
	assert.NoError(t, s.hb.Drop(ctx))
}
