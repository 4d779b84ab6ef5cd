package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

// beatPace is how often the benchmark beats: as a monitor does, at a
// fifth of the default interval, for enough beats in a few seconds.
const beatPace = 100 * time.Millisecond

// BenchmarkSQLiteBeatsUnderRecordLoad measures what SQLite, whose file
// has one writer at a time, makes of the heartbeat store's own pool:
// the beats of one of two node processes sharing a database file (each
// with its stores), one every 100 ms, under four loads of the record stores, with the
// heartbeat store on its own pool ("own", as refnode serve opens it) or
// on the record pool ("shared", as it did before). It reports each
// beat's duration (p50, p99, max) and the share of beats that missed
// the heartbeat's 500 ms timeout. The loads, on 64 VMs:
//
//   - paced: 60 calls/s per process, a write for every two reads;
//
//   - burst: 64 record transactions at once, 5 times a second per process;
//
//   - held: every record connection held 200 ms at a time by a reader,
//     and a writer per process;
//
//   - writes: 8 writers per process in a loop: the file's one writer
//     saturated.
//
//     go test -run '^$' -bench BenchmarkSQLiteBeatsUnderRecordLoad -benchtime 100x ./refnode
func BenchmarkSQLiteBeatsUnderRecordLoad(b *testing.B) {
	for _, load := range []string{"paced", "burst", "held", "writes"} {
		for _, wiring := range []string{"own", "shared"} {
			b.Run(load+"/"+wiring, func(b *testing.B) {
				benchBeats(b, load, wiring == "shared")
			})
		}
	}
}

func benchBeats(b *testing.B, load string, shared bool) {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	url := "sqlite:" + filepath.Join(b.TempDir(), "refnode.db")
	opTimeout := heartbeat.DefaultConfig().OpTimeout
	var procs []*nodeStores
	for range 2 {
		var s *nodeStores
		var err error
		if shared {
			s, err = openSharedStores(ctx, url)
		} else {
			s, err = openStores(ctx, url, heartbeat.DefaultConfig().EvictAfter, "hb", "rec", slog.New(slog.DiscardHandler))
		}
		require.NoError(b, err)
		defer s.close(slog.New(slog.DiscardHandler))
		procs = append(procs, s)
	}
	vms := make([]string, 64)
	for i := range vms {
		vms[i] = message.NewUUID()
		require.NoError(b, procs[0].records.AddVM(ctx, cloud.VM{UUID: vms[i], Name: "bench", ImageUUID: message.NewUUID(),
			HostUUID: message.NewUUID(), CPUs: 1, MemoryMB: 1, State: cloud.VMCreated}))
	}
	node := message.NewUUID()
	epoch, err := procs[0].hb.Register(ctx, node)
	require.NoError(b, err)

	var wg sync.WaitGroup
	defer wg.Wait() // after cancel
	defer cancel()
	var writes atomic.Int64
	write := func(p *nodeStores, i int) {
		if _, err := p.records.UpdateVM(ctx, vms[i%len(vms)], func(v *cloud.VM) error { v.CPUs++; return nil }); err == nil {
			writes.Add(1)
		}
	}
	every := func(period time.Duration, fn func(j int)) {
		wg.Go(func() {
			tick := time.NewTicker(period)
			defer tick.Stop()
			for j := 0; ; j++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				fn(j)
			}
		})
	}
	for i, p := range procs {
		switch load {
		case "paced":
			every(time.Second/60, func(j int) {
				wg.Go(func() {
					if j%3 == 0 {
						write(p, j)
					} else {
						_, _ = p.records.VM(ctx, vms[j%len(vms)])
					}
				})
			})
		case "burst":
			every(200*time.Millisecond, func(j int) {
				for k := range 64 {
					wg.Go(func() { write(p, j*64+k) })
				}
			})
		case "held":
			for range recordConns {
				wg.Go(func() {
					for ctx.Err() == nil {
						holdConn(ctx, p.recPool, 200*time.Millisecond)
					}
				})
			}
			every(10*time.Millisecond, func(j int) { write(p, i+j) })
		case "writes":
			for k := range 8 {
				wg.Go(func() {
					for ctx.Err() == nil {
						write(p, i*8+k)
					}
				})
			}
		}
	}

	var took []time.Duration
	failed := 0
	pace := time.NewTicker(beatPace)
	defer pace.Stop()
	start := time.Now()
	for b.Loop() {
		<-pace.C
		opCtx, cancelOp := context.WithTimeout(ctx, opTimeout)
		t0 := time.Now()
		if procs[0].hb.Beat(opCtx, node, epoch) != nil {
			failed++
		}
		took = append(took, time.Since(t0))
		cancelOp()
	}
	elapsed := time.Since(start)
	slices.Sort(took)
	b.ReportMetric(millis(took[(len(took)-1)/2]), "p50-ms")
	b.ReportMetric(millis(took[(len(took)-1)*99/100]), "p99-ms")
	b.ReportMetric(millis(took[len(took)-1]), "max-ms")
	b.ReportMetric(100*float64(failed)/float64(len(took)), "%missed")
	b.ReportMetric(float64(writes.Load())/elapsed.Seconds(), "writes/s")
}

// holdConn takes a connection of p, reads a record table on it and
// keeps it for d (or until ctx ends).
func holdConn(ctx context.Context, p *sqlconn.Pool, d time.Duration) {
	c, err := p.DB.Conn(ctx)
	if err != nil {
		return
	}
	defer c.Close()
	var n int64
	_ = c.QueryRowContext(ctx, "SELECT COUNT(*) FROM rec_vms").Scan(&n)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// openSharedStores opens the stores as refnode serve did before each
// had its own pool: both on one pool of recordConns connections.
func openSharedStores(ctx context.Context, url string) (*nodeStores, error) {
	p, err := sqlconn.Open(sqlconn.Config{URL: url, MaxOpenConns: recordConns})
	if err != nil {
		return nil, err
	}
	s := &nodeStores{hbPool: p, recPool: p, closers: []closer{{"pool", p.Close}}}
	if s.hb, err = sqlstore.OpenDB(ctx, p.DB, sqlstore.Config{URL: url, Table: "hb"}); err != nil {
		s.close(slog.New(slog.DiscardHandler))
		return nil, err
	}
	if s.records, err = sqldb.Open(ctx, p, sqldb.Config{Prefix: "rec", HeartbeatTable: "hb"}); err != nil {
		s.close(slog.New(slog.DiscardHandler))
		return nil, err
	}
	return s, nil
}
