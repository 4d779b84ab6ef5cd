package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/message"
)

// Monitor beats for one node and watches the others. It starts no
// goroutine. Call Join, Run (once), Leave in that order; other methods
// are safe from any goroutine.
type Monitor struct {
	store    Store
	node     string
	cfg      Config
	listener Listener
	log      *slog.Logger
	clock    *ClockSync    // this node's offset to the store's clock
	locker   SessionLocker // nil unless cfg.SessionLocks and the store has session locks

	initialDelay func() time.Duration

	mu           sync.Mutex
	joining      bool
	joined       bool
	running      bool // Run was called
	left         bool // Leave was called
	deregistered bool
	epoch        int64
	members      []Record // sorted by node; replaced, never modified
	lists        uint64   // successful lists, Join's included
	lastBeat     time.Time
	busDown      bool               // SetBusUp(false) was the last call
	busUpSince   time.Time          // local time of the last SetBusUp(true) after a false; zero: up from the start
	stopRun      context.CancelFunc // cancels Run's context; set by Run
	runDone      chan struct{}      // closed when Run returns
	hold         SessionHold        // this node's session lock, if held

	// Owned by Join, then by Run's goroutine.
	seen        map[string]seenRecord // node -> when this monitor first listed its current (epoch, seq)
	streak      int                   // consecutive rounds whose beat succeeded
	clockRounds int                   // rounds since Join, for sampleClock
	lastAttempt time.Time             // local start of the previous round
	peerLocks   map[string]peerLock   // by node, with locker
	suspects    []suspect             // by due time: peers whose beat falls due before the next round
	holdFailed  bool                  // taking this node's session lock failed since it last succeeded
}

// seenRecord is a record version and when this monitor first listed it.
type seenRecord struct {
	epoch, seq int64
	at         time.Time
}

// healthyRounds is rule 4's count of successful rounds.
const healthyRounds = 3

// NewMonitor returns a monitor for node (a canonical UUID) on store, or
// every problem with its arguments. l and logger may be nil.
func NewMonitor(store Store, node string, cfg Config, l Listener, logger *slog.Logger) (*Monitor, error) {
	var errs []error
	if store == nil {
		errs = append(errs, errors.New("heartbeat: new monitor: nil Store; pass a store such as memstore.New"))
	}
	if !message.IsCanonicalUUID(node) {
		errs = append(errs, fmt.Errorf("heartbeat: new monitor: node %q is not a canonical UUID (32 lower-case hex digits); normalize it with message.NormalizeUUID", node))
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Monitor{
		store:        store,
		node:         node,
		cfg:          cfg,
		listener:     l,
		log:          logger.With("node", node),
		clock:        NewClockSync(cfg.Now),
		initialDelay: func() time.Duration { return rand.N(cfg.Interval) },
	}
	if locker, ok := store.(SessionLocker); ok && cfg.SessionLocks {
		m.locker = locker
		m.peerLocks = make(map[string]peerLock)
	} else if cfg.SessionLocks {
		m.log.Warn("heartbeat: Config.SessionLocks is set but the store has no session locks; peers detect deaths by beats alone", "store", fmt.Sprintf("%T", store))
	}
	return m, nil
}

// Join registers the node and returns its epoch and the records, sorted
// by node, which the caller owns. It reports no events. Join succeeds
// once; after an error it may be retried. After Leave it returns
// [ErrClosed].
func (m *Monitor) Join(ctx context.Context) (epoch int64, members []Record, err error) {
	m.mu.Lock()
	switch {
	case m.left:
		m.mu.Unlock()
		return 0, nil, fmt.Errorf("heartbeat: join node %s after Leave: %w; make a new Monitor", m.node, ErrClosed)
	case m.joined || m.joining:
		m.mu.Unlock()
		return 0, nil, fmt.Errorf("heartbeat: join node %s: Join already called; a Monitor joins once", m.node)
	}
	m.joining = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.joining = false
		m.mu.Unlock()
	}()

	m.sampleClock(ctx)
	if m.locker != nil {
		// Before the record exists, so that a peer that lists the record
		// finds the lock held.
		if err := m.takeSession(ctx); errors.Is(err, ErrSessionHeld) {
			return 0, nil, fmt.Errorf("heartbeat: join node %s: %w", m.node, err)
		} else if err != nil {
			m.log.Warn("heartbeat: join: could not take this node's session lock; peers detect this node's death by its beats alone until it does", "err", err)
		}
	}
	start := m.cfg.Now()
	opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	epoch, err = m.store.Register(opCtx, m.node)
	cancel()
	if err != nil {
		m.releaseSession()
		return 0, nil, fmt.Errorf("heartbeat: join: register node %s: %w; check the store and retry Join", m.node, err)
	}
	opCtx, cancel = context.WithTimeout(ctx, m.cfg.OpTimeout)
	recs, err := m.store.List(opCtx)
	cancel()
	if err != nil {
		m.releaseSession()
		return 0, nil, fmt.Errorf("heartbeat: join: list members after registering node %s epoch %d: %w; retry Join (it registers a new epoch)", m.node, epoch, err)
	}
	if r, ok := find(recs, m.node); !ok || r.Epoch != epoch {
		m.releaseSession()
		return 0, nil, fmt.Errorf("heartbeat: join: node %s epoch %d is missing from the store right after registering (is another process using the same node UUID?): %w", m.node, epoch, ErrEvicted)
	}
	slices.SortFunc(recs, byNode)
	seen := make(map[string]seenRecord, len(recs))
	for _, r := range recs {
		seen[r.Node] = seenRecord{epoch: r.Epoch, seq: r.Seq, at: start}
	}

	m.mu.Lock()
	if m.left {
		// Leave ran while we registered and found nothing to deregister.
		m.mu.Unlock()
		opCtx, cancel = context.WithTimeout(ctx, m.cfg.OpTimeout)
		_ = m.store.Deregister(opCtx, m.node, epoch)
		cancel()
		m.releaseSession()
		return 0, nil, fmt.Errorf("heartbeat: join node %s: Leave was called meanwhile: %w", m.node, ErrClosed)
	}
	m.joined = true
	m.epoch = epoch
	m.members = recs
	m.lastBeat = start
	m.seen = seen
	m.mu.Unlock()
	if offset, bound, ok := m.clock.Offset(); ok {
		level := slog.LevelInfo
		if bound > MaxClockError {
			level = slog.LevelWarn
		}
		m.log.Log(ctx, level, "heartbeat: joined; cluster clock measured", "epoch", epoch, "members", len(recs),
			"clock_offset", offset, "clock_error", bound, "max_clock_error", MaxClockError)
	} else {
		m.log.Info("heartbeat: joined; the store's clock could not be read, so the cluster time is unknown until a round reads it", "epoch", epoch, "members", len(recs))
	}
	return epoch, slices.Clone(recs), nil
}

// SetBusUp sets whether this node reaches the bus (initially true).
func (m *Monitor) SetBusUp(up bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case up && m.busDown:
		m.busDown, m.busUpSince = false, m.cfg.Now()
	case !up && !m.busDown:
		m.busDown = true
	}
}

func (m *Monitor) busState() (up bool, since time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.busDown, m.busUpSince
}

// MaxClockError is the clock error bound above which Join logs a warning.
const MaxClockError = 50 * time.Millisecond

// ClusterTime returns the estimated store time and its error bound; ok
// is false if no clock reading succeeded in the last minute.
func (m *Monitor) ClusterTime() (now time.Time, bound time.Duration, ok bool) {
	return m.clock.Now()
}

const clockSampleEvery = 4

// sampleClock reads the store's clock every clockSampleEvery rounds, or
// every round while the cluster time is unknown or a reading that
// disagreed with the estimate waits for the next to confirm it.
func (m *Monitor) sampleClock(ctx context.Context) {
	m.clockRounds++
	if _, _, known := m.clock.Offset(); known && m.clockRounds%clockSampleEvery != 1 && !m.clock.Doubting() {
		return
	}
	_ = m.readClock(ctx)
}

func (m *Monitor) readClock(ctx context.Context) error {
	opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	defer cancel()
	sent := m.cfg.Now()
	remote, res, err := m.store.StoreTime(opCtx)
	received := m.cfg.Now()
	if err != nil {
		m.log.Debug("heartbeat: read the store's time", "err", err)
		return err
	}
	m.clock.Sample(sent, received, remote, res)
	return nil
}

// SyncClock reads the store's clock unless the cluster time is known,
// and reports an error if it is still unknown. Call it before taking
// messages.
func (m *Monitor) SyncClock(ctx context.Context) error {
	if _, _, known := m.clock.Offset(); known {
		return nil
	}
	if err := m.readClock(ctx); err != nil {
		return fmt.Errorf("heartbeat: node %s: read the store's clock: %w; check the store and retry", m.node, err)
	}
	if _, _, known := m.clock.Offset(); !known {
		return fmt.Errorf("heartbeat: node %s: the store's clock reading was unusable (this process's clock stepped back during it); retry", m.node)
	}
	return nil
}

// Leave stops Run and waits for it (until ctx ends), then deregisters
// the node. No event follows Leave's return. Leave is idempotent and retries
// a failed deregistration.
func (m *Monitor) Leave(ctx context.Context) error {
	m.mu.Lock()
	m.left = true
	stop, done := m.stopRun, m.runDone
	m.mu.Unlock()
	if stop != nil {
		stop()
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("heartbeat: leave node %s: Run did not return (is a listener blocking?): %w; peers evict this node after EvictAfter", m.node, ctx.Err())
		}
	}

	m.mu.Lock()
	joined, deregistered, epoch := m.joined, m.deregistered, m.epoch
	m.mu.Unlock()
	if !joined || deregistered {
		m.releaseSession()
		return nil
	}
	opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	err := m.store.Deregister(opCtx, m.node, epoch)
	cancel()
	// The record is gone (or Leave fails and peers evict the node after
	// EvictAfter): the lock goes, not before.
	m.releaseSession()
	if err != nil {
		return fmt.Errorf("heartbeat: leave: deregister node %s epoch %d: %w; retry Leave, or peers evict the node after EvictAfter", m.node, epoch, err)
	}
	m.mu.Lock()
	m.deregistered = true
	m.mu.Unlock()
	m.log.Info("heartbeat: left", "epoch", epoch)
	return nil
}

// Node returns the node UUID the monitor beats for.
func (m *Monitor) Node() string { return m.node }

// Members returns the records as last listed, minus those this monitor
// evicted, sorted by node. The caller owns the slice.
func (m *Monitor) Members() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// View returns Members and the number of successful lists so far.
func (m *Monitor) View() (members []Record, lists uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members), m.lists
}

// Epoch returns the epoch Join registered, or 0 before Join.
func (m *Monitor) Epoch() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

// LastBeat returns when the last successful beat (or Join's
// registration) was sent, by the node's clock; zero before Join.
func (m *Monitor) LastBeat() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastBeat
}

// LeaseExpired reports whether the node must stop handling resource messages:
// it left, or its last successful beat was sent over Lease ago.
func (m *Monitor) LeaseExpired() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left {
		return true
	}
	if m.lastBeat.IsZero() {
		return false
	}
	return m.cfg.Now().Sub(m.lastBeat) > m.cfg.Lease
}

// Fenced is the old name of [Monitor.LeaseExpired].
//
// Deprecated: use LeaseExpired. Fenced will be removed in the next release.
func (m *Monitor) Fenced() bool { return m.LeaseExpired() }

func find(recs []Record, node string) (Record, bool) {
	for _, r := range recs {
		if r.Node == node {
			return r, true
		}
	}
	return Record{}, false
}

func byNode(a, b Record) int { return strings.Compare(a.Node, b.Node) }
