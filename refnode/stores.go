package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

// The connection pools of refnode serve: the heartbeat store has its
// own, so that beats never wait for a connection behind the records'
// work. One pool shared by both let a database link slowed to 100-150 ms
// per round trip, under about 60 calls a second, fill all 8 connections
// with record transactions within 1.2 s; the beats then timed out
// waiting for a connection, and the node fenced itself and was evicted
// 4.2-4.6 s after the slowdown, though each beat took only 200-300 ms
// once it had a connection. The fence's checks stay on the
// record pool: they run inside the record transactions and decide
// whether a write commits, not whether the node is live (package fence,
// "Writes, not liveness").
//
// SQLite gets the two pools too, though its file has one writer: a beat
// still waits for the write lock of any writing transaction, and its own
// pool spares it only the wait for a connection. Measured with two
// processes on one file (BenchmarkSQLiteBeatsUnderRecordLoad): with every
// record connection held 200 ms at a time, beats took 106 ms (p50) and
// up to 205 ms on a shared pool, 0.4 ms and up to 3 ms on their own; at
// 60 calls a second, or 64 transactions at once 5 times a second, both
// alike; with the writer saturated (16 writers in a loop, 8,000-11,000
// writes a second) 7-11 % of beats missed their 500 ms on their own
// pool, 1 % on a shared one, whose waiting writers the pool hands the
// lock's next turn while SQLite's busy handler lets the beat sleep. That
// load calls for PostgreSQL or MySQL anyway.
const (
	// recordConns caps the record store's pool: its transactions hold a
	// connection for 5 to 9 round trips each (the fence's check, the
	// message's record, the reads and writes, the commit).
	recordConns = 2 * sqlconn.DefaultMaxOpenConns
	// heartbeatConns caps the heartbeat store's pool. Its users each
	// make one statement at a time: the heartbeat monitor (a beat, the
	// list of members and any evictions each interval, the store's
	// clock every 4th), the node's queue sweep (every EvictAfter), and
	// the check of a lifecycle event against the store (one event at a
	// time). Four leave the monitor a free connection while all the
	// others run at once; connections unused for a minute are closed,
	// so a quiet node keeps one or two open.
	heartbeatConns = sqlconn.DefaultMaxOpenConns
)

// nodeStores are a node's heartbeat and record stores and their pools.
type nodeStores struct {
	hb      *sqlstore.Store
	records *sqldb.Store
	// hbPool is the heartbeat store's pool, recPool the record store's.
	hbPool, recPool *sqlconn.Pool
	// closers close what openStores opened, in reverse order.
	closers []closer
}

// close closes the stores and the pools, in reverse order of opening,
// logging what fails.
func (s *nodeStores) close(log *slog.Logger) {
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i].close(); err != nil {
			log.Warn("close "+s.closers[i].what, "err", err)
		}
	}
	s.closers = nil
}

// openStores opens the heartbeat store (table hbTable) and the record
// store (tables recPrefix_*) in the database dbURL names, each on its own
// pool (heartbeatConns and recordConns connections), both bounding a
// transaction's idle time to evictAfter (see idleTxTimeout). On failure
// it closes what it opened. log receives the stores' logs and the MySQL
// driver's.
func openStores(ctx context.Context, dbURL string, evictAfter time.Duration, hbTable, recPrefix string, log *slog.Logger) (_ *nodeStores, err error) {
	s := &nodeStores{}
	defer func() {
		if err != nil {
			s.close(log)
		}
	}()
	u := idleTxTimeout(dbURL, evictAfter, serverIsMariaDB(ctx, dbURL))
	if s.hbPool, err = sqlconn.Open(sqlconn.Config{URL: u, MaxOpenConns: heartbeatConns, Logger: log}); err != nil {
		return nil, fmt.Errorf("open the database: %w; check -db", err)
	}
	s.closers = append(s.closers, closer{"heartbeat pool", s.hbPool.Close})
	if s.recPool, err = sqlconn.Open(sqlconn.Config{URL: u, MaxOpenConns: recordConns, Logger: log}); err != nil {
		return nil, fmt.Errorf("open the database: %w; check -db", err)
	}
	s.closers = append(s.closers, closer{"record pool", s.recPool.Close})
	if s.hb, err = sqlstore.OpenDB(ctx, s.hbPool.DB, sqlstore.Config{URL: dbURL, Table: hbTable, Logger: log}); err != nil {
		return nil, fmt.Errorf("open the heartbeat store: %w; check -db", err)
	}
	s.closers = append(s.closers, closer{"heartbeat store", s.hb.Close})
	if s.records, err = sqldb.Open(ctx, s.recPool, sqldb.Config{Prefix: recPrefix, HeartbeatTable: s.hb.Table(), MaxAge: evictAfter, Logger: log}); err != nil {
		return nil, fmt.Errorf("open the record store: %w; check -db", err)
	}
	s.closers = append(s.closers, closer{"record store", s.records.Close})
	return s, nil
}
