package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Run runs a round every Interval, after a random delay, until ctx ends
// or Leave (then it returns nil) or SelfEvicted (then it fails with
// [ErrEvicted]). Store errors are logged. Run needs a successful Join.
func (m *Monitor) Run(ctx context.Context) error {
	m.mu.Lock()
	switch {
	case m.left:
		m.mu.Unlock()
		return nil
	case !m.joined:
		m.mu.Unlock()
		return fmt.Errorf("heartbeat: run node %s: Join has not succeeded; call Join first", m.node)
	case m.running:
		m.mu.Unlock()
		return fmt.Errorf("heartbeat: run node %s: Run already called; a Monitor runs once (make a new Monitor to join again)", m.node)
	}
	m.running = true
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	m.stopRun, m.runDone = cancel, done
	m.mu.Unlock()
	defer func() {
		cancel()
		close(done)
	}()

	timer := time.NewTimer(m.initialDelay())
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-timer.C:
	}
	ticker := time.NewTicker(m.cfg.Interval)
	defer ticker.Stop()
	suspects := time.NewTimer(time.Hour)
	suspects.Stop()
	defer suspects.Stop()
	for {
		if err := m.round(ctx); err != nil {
			return err
		}
	wait:
		for {
			if len(m.suspects) > 0 {
				suspects.Reset(m.suspects[0].at.Sub(m.cfg.Now()))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-ticker.C:
				suspects.Stop()
				break wait
			case <-suspects.C:
				m.checkSuspects(ctx)
			}
		}
	}
}

// round beats, lists, evicts and reports; it fails only on SelfEvicted.
func (m *Monitor) round(ctx context.Context) error {
	start := m.cfg.Now()
	if !m.lastAttempt.IsZero() && start.Sub(m.lastAttempt) > 2*m.cfg.Interval {
		m.streak = 0
	}
	m.lastAttempt = start

	opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	up, _ := m.busState()
	err := m.store.BeatBus(opCtx, m.node, m.epoch, up)
	cancel()
	if err == nil {
		m.sampleClock(ctx)
	}
	m.keepSession(ctx)
	switch {
	case ctx.Err() != nil:
		return nil
	case err == nil:
		m.streak++
		m.mu.Lock()
		m.lastBeat = start
		m.mu.Unlock()
	case errors.Is(err, ErrEvicted):
		return m.selfEvicted(err)
	default:
		m.streak = 0
		m.log.Warn("heartbeat: beat failed; peers evict this node if its beats fail for EvictAfter",
			"epoch", m.epoch, "evict_after", m.cfg.EvictAfter, "err", err)
	}

	opCtx, cancel = context.WithTimeout(ctx, m.cfg.OpTimeout)
	recs, err := m.store.List(opCtx)
	cancel()
	listed := m.cfg.Now()
	m.suspects = m.suspects[:0]
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		m.log.Warn("heartbeat: list failed; membership unchanged this round", "err", err)
		return nil
	}
	if self, ok := find(recs, m.node); !ok || self.Epoch != m.epoch {
		why := "the record is gone"
		if ok {
			why = fmt.Sprintf("the record has epoch %d", self.Epoch)
		}
		return m.selfEvicted(fmt.Errorf("heartbeat: node %s epoch %d: %s: %w", m.node, m.epoch, why, ErrEvicted))
	}
	slices.SortFunc(recs, byNode)
	m.track(recs, start)
	m.forgetLocks(recs)
	evicted := m.evict(ctx, recs, start)
	m.report(recs, evicted)
	m.armSuspects(recs, evicted, listed)
	return nil
}

// track updates m.seen.
func (m *Monitor) track(recs []Record, now time.Time) {
	live := make(map[string]bool, len(recs))
	for _, r := range recs {
		live[r.Node] = true
		if s, ok := m.seen[r.Node]; !ok || s.epoch != r.Epoch || s.seq != r.Seq {
			m.seen[r.Node] = seenRecord{epoch: r.Epoch, seq: r.Seq, at: now}
		}
	}
	for n := range m.seen {
		if !live[n] {
			delete(m.seen, n)
		}
	}
}

// evict applies the eviction rules; it returns the records it deleted.
func (m *Monitor) evict(ctx context.Context, recs []Record, now time.Time) map[string]Record {
	if m.streak < healthyRounds {
		return nil
	}
	busUp, since := m.busState()
	busSettled := busUp && (since.IsZero() || now.Sub(since) >= m.cfg.BusSettle)
	var evicted map[string]Record
	for _, r := range recs {
		stale := r.Age > m.cfg.EvictAfter && now.Sub(m.seen[r.Node].at) >= m.cfg.EvictAfter-m.cfg.Interval
		zombie := busSettled && r.BusDown > m.cfg.BusDownAfter
		ended := !stale && !zombie && m.sessionEnded(ctx, r)
		if r.Node == m.node || !stale && !zombie && !ended {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
		ok, err := m.store.Evict(opCtx, r.Node, r.Epoch, r.Seq)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				m.log.Warn("heartbeat: evict failed; retrying next round", "peer", r.Node, "peer_epoch", r.Epoch, "err", err)
			}
		case ok && ended:
			m.log.Info("heartbeat: evicted a node whose database session ended", "peer", r.Node, "peer_epoch", r.Epoch, "age", r.Age)
			if evicted == nil {
				evicted = make(map[string]Record)
			}
			evicted[r.Node] = r
		case ok && !stale:
			m.log.Info("heartbeat: evicted a node cut off from the bus", "peer", r.Node, "peer_epoch", r.Epoch, "bus_down", r.BusDown)
			if evicted == nil {
				evicted = make(map[string]Record)
			}
			evicted[r.Node] = r
		case ok:
			m.log.Info("heartbeat: evicted a node that stopped beating", "peer", r.Node, "peer_epoch", r.Epoch, "age", r.Age)
			if evicted == nil {
				evicted = make(map[string]Record)
			}
			evicted[r.Node] = r
		}
	}
	return evicted
}

// report sets the members and reports the differences.
func (m *Monitor) report(recs []Record, evicted map[string]Record) {
	current := make([]Record, 0, len(recs))
	for _, r := range recs {
		if _, ok := evicted[r.Node]; !ok {
			current = append(current, r)
		}
	}
	m.mu.Lock()
	old := m.members
	m.members = current
	m.lists++
	m.mu.Unlock()

	type key struct {
		node  string
		epoch int64
	}
	had := make(map[key]bool, len(old))
	for _, r := range old {
		had[key{r.Node, r.Epoch}] = true
	}
	has := make(map[key]bool, len(current))
	for _, r := range current {
		has[key{r.Node, r.Epoch}] = true
	}

	var gone, joined []Event
	for _, r := range old {
		if r.Node == m.node || has[key{r.Node, r.Epoch}] {
			continue
		}
		if e, ok := evicted[r.Node]; ok && e.Epoch == r.Epoch {
			continue // reported as Evicted below
		}
		gone = append(gone, Event{Kind: Left, Record: r})
	}
	for _, r := range evicted {
		gone = append(gone, Event{Kind: Evicted, Record: r})
	}
	slices.SortStableFunc(gone, func(a, b Event) int { return byNode(a.Record, b.Record) })
	for _, r := range current {
		if r.Node != m.node && !had[key{r.Node, r.Epoch}] {
			joined = append(joined, Event{Kind: Joined, Record: r})
		}
	}
	for _, e := range append(gone, joined...) {
		switch e.Kind {
		case Joined:
			m.log.Info("heartbeat: node joined", "peer", e.Record.Node, "peer_epoch", e.Record.Epoch)
		case Left:
			m.log.Info("heartbeat: node left", "peer", e.Record.Node, "peer_epoch", e.Record.Epoch)
		}
		m.emit(e)
	}
}

// selfEvicted reports SelfEvicted and returns err.
func (m *Monitor) selfEvicted(err error) error {
	m.mu.Lock()
	self, ok := find(m.members, m.node)
	if !ok {
		self = Record{Node: m.node, Epoch: m.epoch}
	}
	m.mu.Unlock()
	m.releaseSession() // a new Monitor joins again as this node
	m.log.Error("heartbeat: this node was evicted; it must stop serving", "epoch", m.epoch, "err", err)
	m.emit(Event{Kind: SelfEvicted, Record: self})
	return err
}

func (m *Monitor) emit(e Event) {
	if m.listener != nil {
		m.listener.HeartbeatEvent(e)
	}
}
