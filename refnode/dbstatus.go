package main

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
)

// beatWindow is how far back GET /status summarizes the beats.
const beatWindow = 30 * time.Second

// beatLog is how many beats a beatStats keeps: beatWindow at the
// fastest beat an operator would set (100 ms), plus some.
const beatLog = 320

// timedStore is the heartbeat store with its beats timed, for GET
// /status. Every other method is the store's own.
type timedStore struct {
	*sqlstore.Store
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

// beatStats keeps the durations of the last beatLog beats. Safe for
// concurrent use.
type beatStats struct {
	mu            sync.Mutex
	total, failed uint64
	run, maxRun   int // failed beats in a row: now, and the most since the start
	log           [beatLog]beat
	next          int
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
	b.log[b.next] = beat{at: at, took: took, failed: failed}
	b.next = (b.next + 1) % beatLog
}

// status summarizes the beats: every one since the start, and those
// that started within beatWindow before now.
func (b *beatStats) status(now time.Time) beatStatus {
	b.mu.Lock()
	st := beatStatus{Total: b.total, TotalFailed: b.failed, FailingNow: b.run, MostFailedInARow: b.maxRun, Window: beatWindow.String()}
	var took []time.Duration
	for _, e := range b.log {
		if e.at.IsZero() || now.Sub(e.at) > beatWindow {
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

// beatStatus is the node's beats in GET /status: every beat's
// duration, from the call to the heartbeat store to its answer, success
// or not.
type beatStatus struct {
	// Total and TotalFailed count the beats since the node started.
	Total       uint64 `json:"total"`
	TotalFailed uint64 `json:"total_failed"`
	// FailingNow counts the beats that failed since the last that
	// succeeded; MostFailedInARow is the longest such run since the
	// start (the lease runs out after about four, Lease/Interval).
	FailingNow       int `json:"failing_now"`
	MostFailedInARow int `json:"most_failed_in_a_row"`
	// Window is how far back the rest looks: the beats that started
	// within it, how many failed, and their durations in milliseconds.
	Window string  `json:"window"`
	Count  int     `json:"count"`
	Failed int     `json:"failed"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
}

// poolStatus is a connection pool in GET /status (sql.DBStats).
type poolStatus struct {
	// MaxOpen caps the pool; Open are open now, InUse of them busy and
	// Idle free.
	MaxOpen int `json:"max_open"`
	Open    int `json:"open"`
	InUse   int `json:"in_use"`
	Idle    int `json:"idle"`
	// WaitCount counts the statements that waited for a connection since
	// the start, WaitMS their total wait in milliseconds.
	WaitCount int64   `json:"wait_count"`
	WaitMS    float64 `json:"wait_ms"`
}

func poolOf(db *sql.DB) poolStatus {
	s := db.Stats()
	return poolStatus{MaxOpen: s.MaxOpenConnections, Open: s.OpenConnections, InUse: s.InUse, Idle: s.Idle,
		WaitCount: s.WaitCount, WaitMS: millis(s.WaitDuration)}
}

// databaseStatus is the node's database in GET /status: its two
// connection pools and its beats.
type databaseStatus struct {
	// Heartbeat is the heartbeat store's pool, Records the record
	// store's.
	Heartbeat poolStatus `json:"heartbeat_pool"`
	Records   poolStatus `json:"records_pool"`
	// Beats are the node's heartbeats.
	Beats beatStatus `json:"beats"`
}

// dbWatch reads a node's databaseStatus.
type dbWatch struct {
	heartbeat, records *sql.DB
	beats              *beatStats
}

func (w *dbWatch) status() databaseStatus {
	return databaseStatus{Heartbeat: poolOf(w.heartbeat), Records: poolOf(w.records), Beats: w.beats.status(time.Now())}
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
