package nodekit

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// BeatWindow is how far back GET /status summarizes the beats
// (BeatStatus.Window).
const BeatWindow = 30 * time.Second

// beatLog is how many beats a beatStats keeps: BeatWindow at the
// fastest beat an operator would set (100 ms), plus some.
const beatLog = 320

// timedStore is the heartbeat store with its beats timed, for GET
// /status. Every other method is the store's own.
type timedStore struct {
	heartbeat.Store
	beats *beatStats
}

// Beat times the store's Beat.
func (s timedStore) Beat(ctx context.Context, node string, epoch int64) error {
	start := time.Now()
	err := s.Store.Beat(ctx, node, epoch)
	s.beats.add(start, time.Since(start), err != nil)
	return err
}

// BeatBus times the store's BeatBus.
func (s timedStore) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	start := time.Now()
	err := s.Store.BeatBus(ctx, node, epoch, busUp)
	s.beats.add(start, time.Since(start), err != nil)
	return err
}

// timedLockingStore is timedStore for a store with session locks, which
// it keeps visible to the monitor.
type timedLockingStore struct {
	timedStore
	heartbeat.SessionLocker
}

// timed returns store with its beats timed into beats, keeping its
// session locks if it has them.
func timed(store heartbeat.Store, beats *beatStats) heartbeat.Store {
	t := timedStore{Store: store, beats: beats}
	if l, ok := store.(heartbeat.SessionLocker); ok {
		return timedLockingStore{timedStore: t, SessionLocker: l}
	}
	return t
}

// beatStats keeps the durations of the last beatLog beats. Safe for
// concurrent use.
type beatStats struct {
	mu            sync.Mutex
	total, failed uint64
	run, maxRun   int // failed beats in a row: now, and the most since the start
	log           [beatLog]beat
	next          int
	lastEnd       time.Time // when the last beat, success or not, ended
}

// beat is one beat: when it started, how long it took, whether it failed.
type beat struct {
	at     time.Time
	took   time.Duration
	failed bool
}

func (b *beatStats) add(at time.Time, took time.Duration, failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total++
	if failed {
		b.failed++
		b.run++
		b.maxRun = max(b.maxRun, b.run)
	} else {
		b.run = 0
	}
	b.lastEnd = at.Add(took)
	b.log[b.next] = beat{at: at, took: took, failed: failed}
	b.next = (b.next + 1) % beatLog
}

// last returns when the last beat, success or not, ended (zero: none
// yet) and how many beats failed since the last that succeeded.
func (b *beatStats) last() (ended time.Time, failing int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastEnd, b.run
}

// status summarizes the beats: every one since the start, and those
// that started within BeatWindow before now.
func (b *beatStats) status(now time.Time) BeatStatus {
	b.mu.Lock()
	st := BeatStatus{Total: b.total, TotalFailed: b.failed, FailingNow: b.run, MostFailedInARow: b.maxRun, Window: BeatWindow.String()}
	var took []time.Duration
	for _, e := range b.log {
		if e.at.IsZero() || now.Sub(e.at) > BeatWindow {
			continue
		}
		took = append(took, e.took)
		if e.failed {
			st.Failed++
		}
	}
	b.mu.Unlock()
	st.Count = len(took)
	if len(took) > 0 {
		slices.Sort(took)
		st.P50MS = millis(took[(len(took)-1)/2])
		st.P99MS = millis(took[(len(took)-1)*99/100])
		st.MaxMS = millis(took[len(took)-1])
	}
	return st
}

// BeatStatus is the node's beats in GET /status: every beat's
// duration, from the call to the heartbeat store to its answer, success
// or not.
type BeatStatus struct {
	Total            uint64  `json:"total"`                // beats since the node started
	TotalFailed      uint64  `json:"total_failed"`         // of them, failed
	FailingNow       int     `json:"failing_now"`          // failed since the last that succeeded
	MostFailedInARow int     `json:"most_failed_in_a_row"` // longest such run (the lease runs out after about Lease/Interval)
	Window           string  `json:"window"`               // how far back the rest looks (BeatWindow)
	Count            int     `json:"count"`                // beats that started within the window
	Failed           int     `json:"failed"`               // of them, failed
	P50MS            float64 `json:"p50_ms"`               // their median duration in milliseconds
	P99MS            float64 `json:"p99_ms"`               // their 99th percentile
	MaxMS            float64 `json:"max_ms"`               // the slowest
}

// PoolStatus is a connection pool in GET /status (sql.DBStats).
type PoolStatus struct {
	MaxOpen   int     `json:"max_open"`   // the pool's cap
	Open      int     `json:"open"`       // connections open now
	InUse     int     `json:"in_use"`     // of them, busy
	Idle      int     `json:"idle"`       // of them, free
	WaitCount int64   `json:"wait_count"` // statements that waited for a connection since the start
	WaitMS    float64 `json:"wait_ms"`    // their total wait in milliseconds
}

func poolOf(db *sql.DB) PoolStatus {
	s := db.Stats()
	return PoolStatus{MaxOpen: s.MaxOpenConnections, Open: s.OpenConnections, InUse: s.InUse, Idle: s.Idle,
		WaitCount: s.WaitCount, WaitMS: millis(s.WaitDuration)}
}

// DatabaseStatus is the node's database in GET /status: its two
// connection pools and its beats.
type DatabaseStatus struct {
	// Heartbeat is the heartbeat store's pool.
	Heartbeat PoolStatus `json:"heartbeat_pool"`
	// Records is the services' pool (Env.DB).
	Records PoolStatus `json:"records_pool"`
	// Beats are the node's heartbeats.
	Beats BeatStatus `json:"beats"`
	// IdleTimeout is the idle-transaction bound the node's sessions run
	// with, as a session reported it at start (Database.Shown): "3s" on
	// PostgreSQL, "3" (seconds) on MariaDB, absent on SQLite and MySQL.
	IdleTimeout string `json:"idle_tx_timeout,omitempty"`
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
