// Package memstore is an in-memory [heartbeat.Store] for tests, demos and
// single-process clusters, with fault injection.
//
// A [Store] keeps the records in maps under a mutex, on the clock
// [Config.Now]; inside a testing/synctest bubble the default clock is
// the bubble's. Each node may reach the store through its own [View]
// ([Store.For]), which [Store.SetUnreachable] cuts off and
// [Store.SetLatency] slows down. Epochs are max(previous epoch + 1, Now
// in Unix microseconds).
package memstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// ErrUnreachable is returned by every call through a [View] of a node
// marked unreachable with [Store.SetUnreachable]. Nothing happened in the
// store, so retrying is safe; it fails until the node is reachable again.
var ErrUnreachable = errors.New("memstore: store unreachable from this node")

// Config configures a [Store]. The zero value works.
type Config struct {
	// Now is the store's clock: it stamps beats and measures ages.
	// Default: time.Now. It must be safe for concurrent use.
	Now func() time.Time
}

// Store is an in-memory [heartbeat.Store]. It is safe for concurrent use
// and needs no Close: it holds no goroutines. Calls made on the Store
// itself never fail except for ctx; calls made through a [View] are
// subject to that view's node's faults.
type Store struct {
	now func() time.Time

	mu        sync.Mutex
	records   map[string]*record
	queues    map[string]map[string]bool // node -> recorded queue names
	lastEpoch int64
	faults    map[string]*fault // by node, for views
	sessions  map[string]*hold  // node -> its session lock's holder
}

type record struct {
	epoch, seq int64
	stamp      time.Time // last beat or registration, by the store's clock
	busDown    time.Time // when the node first reported its bus down; zero while up
}

type fault struct {
	unreachable bool
	latency     time.Duration
}

var _ heartbeat.Store = (*Store)(nil)

// New returns an empty store.
func New(cfg Config) *Store {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{
		now:      cfg.Now,
		records:  make(map[string]*record),
		queues:   make(map[string]map[string]bool),
		faults:   make(map[string]*fault),
		sessions: make(map[string]*hold),
	}
}

// Register implements [heartbeat.Store.Register].
func (s *Store) Register(ctx context.Context, node string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: register %s: %w", node, err)
	}
	if node == "" {
		return 0, errors.New("memstore: register: empty node; pass the node's UUID")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	epoch := max(s.lastEpoch+1, now.UnixMicro())
	s.lastEpoch = epoch
	s.records[node] = &record{epoch: epoch, stamp: now}
	return epoch, nil
}

// Beat implements [heartbeat.Store.Beat].
func (s *Store) Beat(ctx context.Context, node string, epoch int64) error {
	return s.beat(ctx, node, epoch, nil)
}

// BeatBus implements [heartbeat.Store.BeatBus].
func (s *Store) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	return s.beat(ctx, node, epoch, &busUp)
}

func (s *Store) beat(ctx context.Context, node string, epoch int64, busUp *bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: beat %s: %w", node, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[node]
	switch {
	case !ok:
		return fmt.Errorf("memstore: beat %s epoch %d: no record: %w", node, epoch, heartbeat.ErrEvicted)
	case r.epoch != epoch:
		return fmt.Errorf("memstore: beat %s epoch %d: the record has epoch %d: %w", node, epoch, r.epoch, heartbeat.ErrEvicted)
	}
	now := s.now()
	r.seq++
	r.stamp = now
	switch {
	case busUp == nil:
	case *busUp:
		r.busDown = time.Time{}
	case r.busDown.IsZero():
		r.busDown = now
	}
	return nil
}

// AddQueues implements [heartbeat.Store.AddQueues].
func (s *Store) AddQueues(ctx context.Context, node string, queues []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: add queues of %s: %w", node, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues[node] == nil {
		s.queues[node] = make(map[string]bool)
	}
	for _, q := range queues {
		s.queues[node][q] = true
	}
	return nil
}

// Queues implements [heartbeat.Store.Queues].
func (s *Store) Queues(ctx context.Context) (map[string][]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: list queues: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]string, len(s.queues))
	for node, qs := range s.queues {
		for q := range qs {
			out[node] = append(out[node], q)
		}
	}
	return out, nil
}

// RemoveQueues implements [heartbeat.Store.RemoveQueues].
func (s *Store) RemoveQueues(ctx context.Context, node string, queues []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: remove queues of %s: %w", node, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range queues {
		delete(s.queues[node], q)
	}
	if len(s.queues[node]) == 0 {
		delete(s.queues, node)
	}
	return nil
}

// StoreTime implements [heartbeat.Store.StoreTime]: Config.Now, exact.
func (s *Store) StoreTime(ctx context.Context) (time.Time, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, 0, err
	}
	return s.now(), 0, nil
}

// List implements [heartbeat.Store.List]. An age that would be negative,
// because the store's clock went back, is reported as 0.
func (s *Store) List(ctx context.Context) ([]heartbeat.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: list: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]heartbeat.Record, 0, len(s.records))
	for node, r := range s.records {
		rec := heartbeat.Record{Node: node, Epoch: r.epoch, Seq: r.seq, Age: max(now.Sub(r.stamp), 0)}
		if !r.busDown.IsZero() {
			rec.BusDown = max(now.Sub(r.busDown), time.Nanosecond)
		}
		out = append(out, rec)
	}
	return out, nil
}

// Evict implements [heartbeat.Store.Evict].
func (s *Store) Evict(ctx context.Context, node string, epoch, seq int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("memstore: evict %s: %w", node, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.records[node]; ok && r.epoch == epoch && r.seq == seq {
		delete(s.records, node)
		return true, nil
	}
	return false, nil
}

// Deregister implements [heartbeat.Store.Deregister].
func (s *Store) Deregister(ctx context.Context, node string, epoch int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: deregister %s: %w", node, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.records[node]; ok && r.epoch == epoch {
		delete(s.records, node)
	}
	return nil
}
