package services

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// errNotMine is returned by a status update refused because the host's
// record names another managing node.
var errNotMine = errors.New("host is managed by another node")

// run is the tracker: it pings the tracked hosts every PingInterval and
// resyncs with the ring when asked (and every ResyncEvery rounds). It
// returns when Stop is called.
func (s *HostService) run(ctx context.Context) {
	t := time.NewTimer(rand.N(s.cfg.PingInterval) + 1) // jitter the first round
	defer t.Stop()
	for rounds := 1; ; rounds++ {
		select {
		case <-s.stop:
			return
		case <-s.resync:
			s.resyncHosts(ctx)
			rounds--
			continue
		case <-t.C:
		}
		if rounds%s.cfg.ResyncEvery == 0 || s.needResync.Load() {
			s.resyncHosts(ctx)
		}
		s.pingAll(ctx)
		t.Reset(s.cfg.PingInterval)
	}
}

// resyncHosts compares the host list with the ring: it reconnects the
// hosts this node owns but does not manage (takeover) and stops tracking
// those it no longer owns.
func (s *HostService) resyncHosts(ctx context.Context) {
	if s.node.State() != service.StateServing {
		return
	}
	hosts, err := s.cfg.Store.Hosts(ctx)
	if err != nil {
		s.needResync.Store(true)
		s.log.Warn("host tracker: list hosts failed; retrying at the next round", "err", err)
		return
	}
	s.needResync.Store(false)
	me := s.node.UUID()
	var take []cloud.Host
	var drop []string
	s.mu.Lock()
	for _, h := range hosts {
		_, tracked := s.tracked[h.UUID]
		switch owns := s.node.Owns(h.UUID); {
		case owns && !tracked && h.ManagedBy == me && h.Status == cloud.HostConnected:
			s.tracked[h.UUID] = h.Status
		case owns && !tracked:
			take = append(take, h)
		case !owns && tracked:
			drop = append(drop, h.UUID)
		}
	}
	s.mu.Unlock()
	for _, id := range drop {
		s.untrack(id, "the ring names another owner now")
	}
	s.parallel(len(take), func(i int) {
		_, _ = s.reconnect(ctx, take[i], "this node owns it now")
	})
}

// reconnect connects h and records this node as its manager, with status
// connected or, if the connect failed, disconnected (the ping rounds
// retry). It counts a takeover when the record named another node.
func (s *HostService) reconnect(ctx context.Context, h cloud.Host, why string) (cloud.Host, error) {
	me := s.node.UUID()
	opCtx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	connErr := s.cfg.Hypervisor.Connect(opCtx, h)
	cancel()
	if ctx.Err() != nil {
		return h, ctx.Err() // stopping
	}
	prev := ""
	rec, err := s.updateHost(ctx, h.UUID, func(rec *cloud.Host) error {
		prev = rec.ManagedBy
		if prev != me && prev != "" {
			rec.Takeovers++
		}
		rec.ManagedBy = me
		if connErr != nil {
			rec.Status = cloud.HostDisconnected
		} else {
			rec.Status, rec.ConnectedAt = cloud.HostConnected, time.Now()
		}
		return nil
	})
	if err != nil {
		s.needResync.Store(true)
		s.log.Warn("host tracker: record reconnect failed; retrying at the next round", "host", h.UUID, "err", err)
		return h, err
	}
	s.setTracked(h.UUID, rec.Status)
	if connErr != nil {
		s.log.Warn("host reconnect failed; retrying at the next ping round", "host", h.UUID, "why", why, "err", connErr)
		return rec, connErr
	}
	s.reconnects.Add(1)
	if prev != me && prev != "" {
		s.takeovers.Add(1)
		s.log.Info("host taken over and reconnected", "host", h.UUID, "from", prev, "why", why)
	} else {
		s.log.Info("host reconnected", "host", h.UUID, "why", why)
	}
	return rec, nil
}

// pingAll pings every tracked host: a host that stops answering is
// marked disconnected, one that answers again is reconnected.
func (s *HostService) pingAll(ctx context.Context) {
	s.mu.Lock()
	snap := maps.Clone(s.tracked)
	s.mu.Unlock()
	ids := make([]string, 0, len(snap))
	for id := range snap {
		ids = append(ids, id)
	}
	s.parallel(len(ids), func(i int) {
		id := ids[i]
		opCtx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		err := s.cfg.Hypervisor.Ping(opCtx, id)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.pings.Add(1)
		switch {
		case err == nil && snap[id] == cloud.HostConnected:
		case err == nil:
			if h, err := s.cfg.Store.Host(ctx, id); err == nil {
				_, _ = s.reconnect(ctx, h, "it answers pings again")
			}
		default:
			s.pingFailures.Add(1)
			if snap[id] == cloud.HostConnected {
				s.markDisconnected(ctx, id, err)
			}
		}
	})
}

func (s *HostService) markDisconnected(ctx context.Context, id string, cause error) {
	me := s.node.UUID()
	_, err := s.updateHost(ctx, id, func(rec *cloud.Host) error {
		if rec.ManagedBy != me {
			return errNotMine
		}
		rec.Status = cloud.HostDisconnected
		return nil
	})
	switch {
	case errors.Is(err, errNotMine):
		s.untrack(id, "another node manages it")
	case err != nil:
		s.log.Warn("host tracker: record disconnect failed", "host", id, "err", err)
	default:
		s.setTracked(id, cloud.HostDisconnected)
		s.log.Warn("host stopped answering pings: disconnected", "host", id, "err", cause)
	}
}

// parallel runs f(0..n-1) with at most MaxParallel at once and waits.
func (s *HostService) parallel(n int, f func(i int)) {
	sem := make(chan struct{}, s.cfg.MaxParallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// updateHost applies update to host id's record in a transaction fenced
// by this node's claim on the host: a node whose claim stopped holding
// (peers evicted it) writes nothing, and the tracker stops tracking the
// host until a resync finds it its own again.
func (s *HostService) updateHost(ctx context.Context, id string, update func(*cloud.Host) error) (cloud.Host, error) {
	w := fence.Guard{Claim: fence.Claim{Resource: id, Node: s.node.UUID(), Epoch: s.node.Epoch()}}
	var out cloud.Host
	_, err := s.cfg.Store.Do(ctx, w, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		var err error
		out, err = tx.UpdateHost(ctx, id, update)
		return nil, err
	})
	if errors.Is(err, fence.ErrStale) {
		s.untrack(id, "this node's claim on it no longer holds")
		s.needResync.Store(true)
	}
	return out, stale(s.log, err)
}
