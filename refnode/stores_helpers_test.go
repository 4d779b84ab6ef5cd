package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// The pools' caps, as the node kit sets them for refnode serve.
const (
	recordConns    = nodekit.ServiceConns
	heartbeatConns = nodekit.HeartbeatConns
)

// closer is one thing a test opened, closed in reverse order.
type closer struct {
	what  string
	close func() error
}

// nodeStores are a node's heartbeat and record stores and their pools,
// opened as refnode serve opens them (through the node kit).
type nodeStores struct {
	hb      *sqlstore.Store
	records *sqldb.Store
	// hbPool is the heartbeat store's pool, recPool the record store's.
	hbPool, recPool *sqlconn.Pool
	closers         []closer
}

// close closes the stores and the pools, in reverse order of opening.
func (s *nodeStores) close(log *slog.Logger) {
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i].close(); err != nil {
			log.Warn("close "+s.closers[i].what, "err", err)
		}
	}
	s.closers = nil
}

// openStores opens the stores of a node as refnode serve does:
// nodekit.OpenDatabase (each store on its own pool, the idle-transaction
// bound), and the record store on the services' pool.
func openStores(ctx context.Context, dbURL string, evictAfter time.Duration, hbTable, recPrefix string, log *slog.Logger) (_ *nodeStores, err error) {
	u, err := sqlconn.ParseURL(dbURL, sqlconn.Auto)
	if err != nil {
		return nil, err
	}
	d, err := nodekit.OpenDatabase(ctx, nodekit.DatabaseConfig{URL: dbURL, HeartbeatTable: hbTable, EvictAfter: evictAfter, Logger: log})
	if err != nil {
		return nil, err
	}
	s := &nodeStores{hb: d.Heartbeat, hbPool: &sqlconn.Pool{DB: d.HeartbeatDB(), URL: u}, recPool: &sqlconn.Pool{DB: d.DB(), URL: u},
		closers: []closer{{"database", d.Close}}}
	if s.records, err = sqldb.Open(ctx, s.recPool, sqldb.Config{Prefix: recPrefix, HeartbeatTable: hbTable, MaxAge: evictAfter, Logger: log}); err != nil {
		s.close(log)
		return nil, fmt.Errorf("open the record store: %w", err)
	}
	s.closers = append(s.closers, closer{"record store", s.records.Close})
	return s, nil
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
