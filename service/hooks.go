package service

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
)

// hooks runs the services' listeners off the message path.
type hooks struct {
	n *Node

	mu        sync.Mutex
	changed   map[string]bool // node -> last change was a join
	isEvicted bool

	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	start1 sync.Once
}

func newHooks(n *Node) *hooks {
	ctx, cancel := context.WithCancel(context.Background())
	return &hooks{
		n:       n,
		changed: make(map[string]bool),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
	}
}

func (h *hooks) ringChanged(node string, joined bool) {
	h.mu.Lock()
	h.changed[node] = joined
	h.mu.Unlock()
	h.signal()
}

func (h *hooks) evicted() {
	h.mu.Lock()
	h.isEvicted = true
	h.mu.Unlock()
	h.signal()
}

func (h *hooks) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *hooks) start() {
	h.start1.Do(func() { go h.run() })
}

func (h *hooks) close() {
	h.once.Do(func() {
		started := true
		h.start1.Do(func() { started = false })
		close(h.stop)
		if started {
			ctx, cancel := h.n.exitContext(h.n.closeReserve() / 4)
			select {
			case <-h.done:
			case <-ctx.Done():
				h.n.log.Warn("listeners still running at stop; canceling them")
			}
			cancel()
		}
		h.cancel()
		if started {
			<-h.done
		}
	})
}

func (h *hooks) run() {
	defer close(h.done)
	for {
		select {
		case <-h.wake:
		case <-h.stop:
			h.deliver() // what is pending, then exit
			return
		}
		h.deliver()
	}
}

func (h *hooks) deliver() {
	h.mu.Lock()
	var ch RingChange
	for node, joined := range h.changed {
		if joined {
			ch.Joined = append(ch.Joined, node)
		} else {
			ch.Left = append(ch.Left, node)
		}
	}
	h.changed = make(map[string]bool)
	evicted := h.isEvicted
	h.isEvicted = false
	h.mu.Unlock()

	if len(ch.Joined)+len(ch.Left) > 0 {
		slices.Sort(ch.Joined)
		slices.Sort(ch.Left)
		ch.Members = h.n.ring.Members()
		ch.Fingerprint = h.n.ring.Fingerprint()
		for _, s := range h.n.cfg.Services {
			if l, ok := s.(RingListener); ok {
				h.call(s.Name(), func() { l.RingChanged(h.ctx, ch) })
			}
		}
	}
	if evicted {
		for _, s := range h.n.cfg.Services {
			if l, ok := s.(EvictionListener); ok {
				h.call(s.Name(), func() { l.Evicted(h.ctx) })
			}
		}
	}
}

func (h *hooks) call(service string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			h.n.log.Error("listener panicked", "service", service, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	f()
}
