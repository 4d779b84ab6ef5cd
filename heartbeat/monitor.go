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

// Monitor keeps one node's membership record alive and watches the
// others': [Monitor.Join] registers the node, [Monitor.Run] beats, lists,
// evicts stale records and reports changes to a [Listener], and
// [Monitor.Leave] says goodbye. See the package documentation for the
// timing and the eviction safety rules.
//
// A Monitor starts no goroutines of its own: Run blocks in the caller's
// goroutine, which owns the loop. Members, Epoch and LastBeat are safe to
// call from any goroutine at any time; Join, Run and Leave follow the
// sequence Join, Run (at most once), Leave.
type Monitor struct {
	store    Store
	node     string
	cfg      Config
	listener Listener
	log      *slog.Logger
	clock    *ClockSync // this node's offset to the store's clock

	// initialDelay returns the delay before Run's first round; tests
	// replace it to fix the phase.
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

	// Owned by Join, then by Run's goroutine.
	seen        map[string]seenRecord // node -> when this monitor first listed its current (epoch, seq)
	streak      int                   // consecutive rounds whose beat succeeded
	clockRounds int                   // rounds since Join, for sampleClock
	lastAttempt time.Time             // local start of the previous round
}

// seenRecord is a record version and the local time of the round that
// first listed it.
type seenRecord struct {
	epoch, seq int64
	at         time.Time
}

// healthyRounds is how many consecutive successful beats (this round's
// included) a monitor needs before it evicts: two full intervals of
// working store access, so that after an outage every live node has beaten
// at least once, with an interval to spare, before anyone evicts.
const healthyRounds = 3

// NewMonitor returns a monitor for node (a canonical 32-hex UUID) on
// store. cfg's zero fields take their [DefaultConfig] values and the
// result is validated; every problem is reported at once. l may be nil
// (no events); a nil logger discards logs.
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
	return &Monitor{
		store:        store,
		node:         node,
		cfg:          cfg,
		listener:     l,
		log:          logger.With("node", node),
		clock:        NewClockSync(cfg.Now),
		initialDelay: func() time.Duration { return rand.N(cfg.Interval) },
	}, nil
}

// Join registers the node with a new epoch, then lists the records. It
// returns the epoch and the live records, this node's included, sorted by
// node; the caller owns the slice. They are the baseline later events
// are relative to: Join reports no events. The registration counts as a
// beat for [Monitor.LastBeat].
//
// Join succeeds at most once. After an error it may be retried; each
// attempt registers a new epoch, replacing the record of the failed one.
// Join after Leave returns [ErrClosed].
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
	start := m.cfg.Now()
	opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	epoch, err = m.store.Register(opCtx, m.node)
	cancel()
	if err != nil {
		return 0, nil, fmt.Errorf("heartbeat: join: register node %s: %w; check the store and retry Join", m.node, err)
	}
	opCtx, cancel = context.WithTimeout(ctx, m.cfg.OpTimeout)
	recs, err := m.store.List(opCtx)
	cancel()
	if err != nil {
		return 0, nil, fmt.Errorf("heartbeat: join: list members after registering node %s epoch %d: %w; retry Join (it registers a new epoch)", m.node, epoch, err)
	}
	if r, ok := find(recs, m.node); !ok || r.Epoch != epoch {
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

// SetBusUp tells the monitor whether this node reaches the message bus.
// Its beats report it (Store.BeatBus), so that peers evict a node cut
// off from the bus for longer than Config.BusDownAfter; and a monitor
// whose bus is down, or came back less than Config.BusSettle ago, evicts
// nobody for theirs (rule 5 of the package documentation). A monitor
// starts with the bus up. Safe for concurrent use.
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

// busState returns whether the bus is up and since when (zero: always).
func (m *Monitor) busState() (up bool, since time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.busDown, m.busUpSince
}

// MaxClockError is the error bound of the cluster clock a node should
// reach: a monitor whose best estimate is worse logs a warning at Join.
// Deadlines hold to within this bound plus the receiver's scheduling
// (see message.Envelope.Deadline); a round trip to the store under 100
// ms reaches it.
const MaxClockError = 50 * time.Millisecond

// ClusterTime returns the cluster time, that is the store's clock as
// this node estimates it from its round trips to the store, and the
// bound of the estimate's error. ok is false if no round trip succeeded
// in the last minute. Safe for concurrent use.
func (m *Monitor) ClusterTime() (now time.Time, bound time.Duration, ok bool) {
	return m.clock.Now()
}

// clockSampleEvery is how many rounds pass between two readings of the
// store's clock once the cluster time is known: the estimate keeps the
// best reading of the last minute, so a reading every few rounds is
// plenty, and the store is spared a query per round.
const clockSampleEvery = 4

// sampleClock reads the store's time: at Join, then every
// clockSampleEvery rounds, and every round while the cluster time is
// unknown.
func (m *Monitor) sampleClock(ctx context.Context) {
	m.clockRounds++
	if _, _, known := m.clock.Offset(); known && m.clockRounds%clockSampleEvery != 1 {
		return
	}
	_ = m.readClock(ctx)
}

// readClock makes one round trip to the store's clock and keeps the
// reading.
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

// SyncClock measures the cluster time (one round trip to the store's
// clock) unless it is already known. A node calls it before it takes any
// message, Join included: a message that waited in its queue (for a node
// rejoining after an eviction, in the queue of its earlier life) carries
// its deadline in cluster time, and a receiver that cannot read it counts
// the relative timeout from the arrival, as if the message were fresh.
// It returns nil once the cluster time is known; otherwise the round
// trip's error (ctx ended, or the store did not answer within
// Config.OpTimeout). Safe for concurrent use.
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

// Leave says goodbye: it stops Run if it is running and waits for it to
// return (bounded by ctx), then deregisters the node's record, so peers
// report Left at their next round without waiting for EvictAfter. After
// Leave, Run returns nil (at once, if it had not started) and never
// reports SelfEvicted, and no events follow Leave's return.
//
// Both shutdown orders are safe: cancel Run's context and then call
// Leave, or call Leave while Run is running (Run returns nil). Leave is
// idempotent: a call after a successful one returns nil; a call after a
// failed deregistration retries it. Leave before Join only marks the
// monitor closed. Leave must not be called from the Listener (it would
// wait for itself until ctx ends). If it fails, the record stays until
// peers evict it after EvictAfter.
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
		return nil
	}
	opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	err := m.store.Deregister(opCtx, m.node, epoch)
	cancel()
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

// Members returns the live records as last listed, this node's included,
// minus those this monitor evicted since, sorted by node. A stale record
// not yet evicted is a member. The caller owns the slice. Before Join it
// is empty.
func (m *Monitor) Members() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// View returns the last listed live records, like Members, and the
// number of successful lists so far: two views with different numbers
// come from two different reads of the store. While the store cannot be
// read the number stays put, so a caller can tell a fresh view from a
// stale one.
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

// LastBeat returns the local time at which the last successful beat (or
// the registration) was sent, or the zero time before Join. The store
// stamped that beat no earlier.
func (m *Monitor) LastBeat() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastBeat
}

// Fenced reports whether the node must stop handling resource messages:
// it joined, and its last successful beat was sent longer than
// Config.Lease ago (or it left). Peers may evict it EvictAfter after that
// beat landed, so the fence closes at least EvictAfter-Lease before
// anyone else can own its resources. It opens again with the next beat
// that succeeds. Fenced is cheap and safe to call from any goroutine.
func (m *Monitor) Fenced() bool {
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

// find returns node's record in recs.
func find(recs []Record, node string) (Record, bool) {
	for _, r := range recs {
		if r.Node == node {
			return r, true
		}
	}
	return Record{}, false
}

func byNode(a, b Record) int { return strings.Compare(a.Node, b.Node) }
