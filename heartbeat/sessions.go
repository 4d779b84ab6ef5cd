package heartbeat

import (
	"context"
	"errors"
	"slices"
	"time"
)

// peerLock is what this monitor knows of a peer's session lock in one of
// the peer's lives (an epoch).
type peerLock struct {
	epoch int64
	held  bool // seen held in this epoch: a free lock now means the session ended
}

// suspectAfter is the record age past which a peer's session lock is
// tested: its beat is a quarter Interval late.
func (m *Monitor) suspectAfter() int64 { return int64(m.cfg.Interval + m.cfg.Interval/4) }

// takeSession takes this node's session lock; Join and rounds without a
// hold call it.
func (m *Monitor) takeSession(ctx context.Context) error {
	opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	defer cancel()
	h, err := m.locker.HoldSession(opCtx, m.node)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.hold = h
	m.mu.Unlock()
	return nil
}

// keepSession checks this node's session lock once a round and takes it
// again if its session ended (a reset connection, a restarted database),
// before peers may act on the free lock: a peer acts only once this
// node's beat is late too.
func (m *Monitor) keepSession(ctx context.Context) {
	if m.locker == nil {
		return
	}
	m.mu.Lock()
	h := m.hold
	m.mu.Unlock()
	if h != nil {
		opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
		err := h.Check(opCtx)
		cancel()
		if err == nil || !errors.Is(err, ErrSessionLost) {
			if err != nil && ctx.Err() == nil {
				m.log.Debug("heartbeat: could not check this node's session lock; keeping it", "err", err)
			}
			return
		}
		m.log.Warn("heartbeat: this node's database session ended; taking its session lock again", "err", err)
		_ = h.Release()
		m.mu.Lock()
		m.hold = nil
		m.mu.Unlock()
	}
	err := m.takeSession(ctx)
	switch {
	case err == nil:
		m.holdFailed = false
	case ctx.Err() != nil:
	case !m.holdFailed:
		// Once: a session the database has not ended yet (a cut link's)
		// holds it until the database gives up on it.
		m.holdFailed = true
		m.log.Warn("heartbeat: could not take this node's session lock; peers detect this node's death by its beats alone until it does; retrying every round", "err", err)
	default:
		m.log.Debug("heartbeat: could not take this node's session lock", "err", err)
	}
}

// releaseSession releases this node's session lock, if it holds it.
func (m *Monitor) releaseSession() {
	m.mu.Lock()
	h := m.hold
	m.hold = nil
	m.mu.Unlock()
	if h != nil {
		_ = h.Release()
	}
}

// sessionEnded reports whether r's session lock, seen held in r's epoch,
// is free now that r's beat is late. A peer's lock is tested once in each
// of its lives, to learn that it holds one, and again whenever its beat
// is late; an error leaves it untested until the next round.
func (m *Monitor) sessionEnded(ctx context.Context, r Record) bool {
	if m.locker == nil || r.Node == m.node {
		return false
	}
	pl, known := m.peerLocks[r.Node]
	if known && pl.epoch == r.Epoch && int64(r.Age) <= m.suspectAfter() {
		return false
	}
	opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	free, err := m.locker.SessionFree(opCtx, r.Node)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			m.log.Debug("heartbeat: could not test a peer's session lock", "peer", r.Node, "err", err)
		}
		return false
	}
	if !known || pl.epoch != r.Epoch {
		pl = peerLock{epoch: r.Epoch}
	}
	ended := free && pl.held
	if !free {
		pl.held = true
	}
	m.peerLocks[r.Node] = pl
	return ended && m.confirmDead(ctx, r.Node)
}

// confirmDead asks Config.ConfirmDead, if set, whether node is dead.
func (m *Monitor) confirmDead(ctx context.Context, node string) bool {
	if m.cfg.ConfirmDead == nil {
		return true
	}
	opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
	defer cancel()
	dead, err := m.cfg.ConfirmDead(opCtx, node)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Debug("heartbeat: could not confirm a peer's death; leaving it to the beat rule", "peer", node, "err", err)
		}
		return false
	}
	if !dead {
		m.log.Debug("heartbeat: a peer's session lock is free but it is not confirmed dead; leaving it to the beat rule", "peer", node)
	}
	return dead
}

// forgetLocks drops what is known of the locks of nodes no longer listed.
func (m *Monitor) forgetLocks(recs []Record) {
	if m.locker == nil {
		return
	}
	for n := range m.peerLocks {
		if _, ok := find(recs, n); !ok {
			delete(m.peerLocks, n)
		}
	}
}

// suspect is a peer, seen holding its lock, whose beat falls due before
// this monitor's next round: at at, its record's age passes
// suspectAfter. Its lock is tested then rather than a round later.
type suspect struct {
	rec Record
	at  time.Time // by this node's clock
}

// suspectMargin is added to a suspect's due time: the store's clock and
// this node's may tick apart by this much between two readings.
const suspectMargin = 5 * time.Millisecond

// armSuspects lists the peers whose beat falls due before the next round,
// from the records listed at listed.
func (m *Monitor) armSuspects(recs []Record, evicted map[string]Record, listed time.Time) {
	if m.locker == nil || m.streak < healthyRounds {
		return
	}
	for _, r := range recs {
		if _, gone := evicted[r.Node]; gone || r.Node == m.node {
			continue
		}
		if pl, ok := m.peerLocks[r.Node]; !ok || pl.epoch != r.Epoch || !pl.held {
			continue
		}
		wait := time.Duration(m.suspectAfter()-int64(r.Age)) + suspectMargin
		if wait > 0 && wait < m.cfg.Interval {
			m.suspects = append(m.suspects, suspect{rec: r, at: listed.Add(wait)})
		}
	}
	slices.SortFunc(m.suspects, func(a, b suspect) int { return a.at.Compare(b.at) })
}

// checkSuspects tests the locks of the suspects now due and evicts those
// whose lock is free, by the epoch and sequence listed: a peer that beat
// since keeps its record.
func (m *Monitor) checkSuspects(ctx context.Context) {
	now := m.cfg.Now()
	n := 0
	for n < len(m.suspects) && !m.suspects[n].at.After(now) {
		n++
	}
	due := slices.Clone(m.suspects[:n])
	m.suspects = slices.Delete(m.suspects, 0, n)
	if m.streak < healthyRounds {
		return
	}
	var evicted map[string]Record
	for _, s := range due {
		if ctx.Err() != nil {
			return
		}
		opCtx, cancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
		free, err := m.locker.SessionFree(opCtx, s.rec.Node)
		cancel()
		if err != nil || !free || !m.confirmDead(ctx, s.rec.Node) {
			continue
		}
		opCtx, cancel = context.WithTimeout(ctx, m.cfg.OpTimeout)
		ok, err := m.store.Evict(opCtx, s.rec.Node, s.rec.Epoch, s.rec.Seq)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("heartbeat: evict failed; retrying next round", "peer", s.rec.Node, "peer_epoch", s.rec.Epoch, "err", err)
			}
			continue
		}
		if ok {
			m.log.Info("heartbeat: evicted a node whose database session ended", "peer", s.rec.Node, "peer_epoch", s.rec.Epoch, "beat_due", s.at.Sub(now))
			if evicted == nil {
				evicted = make(map[string]Record)
			}
			evicted[s.rec.Node] = s.rec
		}
	}
	if len(evicted) == 0 {
		return
	}
	m.mu.Lock()
	members := slices.DeleteFunc(slices.Clone(m.members), func(r Record) bool { _, ok := evicted[r.Node]; return ok })
	m.members = members
	m.mu.Unlock()
	gone := make([]Event, 0, len(evicted))
	for _, r := range evicted {
		gone = append(gone, Event{Kind: Evicted, Record: r})
	}
	slices.SortFunc(gone, func(a, b Event) int { return byNode(a.Record, b.Record) })
	for _, e := range gone {
		m.emit(e)
	}
}
