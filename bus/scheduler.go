package bus

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// scheduler runs jobs with one key (resource UUID) one at a time in
// order, others in parallel, at most maxConc at once; a key holds at most
// perKey waiting jobs (more: message.ErrBusy).
type scheduler struct {
	maxConc, perKey int

	mu      sync.Mutex
	closed  bool
	running int
	queued  int
	keys    map[string]*line
	ready   []*line         // lines with a waiting job and none running, FIFO
	idle    []chan struct{} // closed when running == queued == 0
	parked  []chan task     // idle workers waiting for a task
	spare   []*line         // lines no key uses, for reuse (at most maxSpare)
	wg      sync.WaitGroup
}

type task struct {
	l *line
	j *job
}

// line is the waiting line of one key, or of one unkeyed job.
type line struct {
	key     string
	jobs    []*job
	running bool
}

type job struct {
	run func()          // handles, replies, acknowledges
	d   driver.Delivery // given back if the job never runs; nil: nothing to give back
}

func newScheduler(maxConc, perKey int) *scheduler {
	return &scheduler{maxConc: maxConc, perKey: perKey, keys: make(map[string]*line)}
}

// submit queues j under key ("" for none); it never blocks.
func (s *scheduler) submit(key string, j *job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return message.ErrClosed
	}
	if key == "" {
		l := s.newLine(key)
		l.jobs = append(l.jobs, j)
		s.ready = append(s.ready, l)
	} else if l := s.keys[key]; l != nil {
		if len(l.jobs) >= s.perKey {
			return message.ErrBusy
		}
		l.jobs = append(l.jobs, j)
		if len(l.jobs) == 1 && !l.running {
			s.ready = append(s.ready, l)
		}
	} else {
		l := s.newLine(key)
		l.jobs = append(l.jobs, j)
		s.keys[key] = l
		s.ready = append(s.ready, l)
	}
	s.queued++
	s.pump()
	return nil
}

// maxSpare bounds the lines a scheduler keeps for reuse.
const maxSpare = 64

// newLine returns an empty line for key, reused if one is spare; s.mu is
// held.
func (s *scheduler) newLine(key string) *line {
	if n := len(s.spare); n > 0 {
		l := s.spare[n-1]
		s.spare[n-1] = nil
		s.spare = s.spare[:n-1]
		l.key = key
		return l
	}
	return &line{key: key}
}

// popFront removes and returns the first element of the non-empty *q;
// a slice it empties goes back to the start of its array, so that a
// scheduler that keeps up appends without allocating.
func popFront[T any](q *[]*T) *T {
	v := (*q)[0]
	(*q)[0] = nil
	if len(*q) == 1 {
		*q = (*q)[:0]
	} else {
		*q = (*q)[1:]
	}
	return v
}

// take starts the next ready job; s.mu is held and a slot is free.
func (s *scheduler) take() task {
	l := popFront(&s.ready)
	j := popFront(&l.jobs)
	l.running = true
	s.running++
	s.queued--
	return task{l: l, j: j}
}

// canRun reports whether a ready job may start; s.mu is held.
func (s *scheduler) canRun() bool {
	return !s.closed && s.running < s.maxConc && len(s.ready) > 0
}

// pump starts ready jobs while slots are free; s.mu is held.
func (s *scheduler) pump() {
	for s.canRun() {
		t := s.take()
		if n := len(s.parked); n > 0 {
			w := s.parked[n-1]
			s.parked = s.parked[:n-1]
			w <- t // buffered: never blocks
			continue
		}
		s.wg.Add(1)
		go s.work(t)
	}
}

// work runs tasks, then parks until handed another; workers are reused so
// handlers start on a grown stack.
func (s *scheduler) work(t task) {
	defer s.wg.Done()
	inbox := make(chan task, 1)
	idle := time.NewTimer(workerIdle)
	idle.Stop()
	for {
		t.j.run()
		s.mu.Lock()
		s.finish(t.l)
		if s.canRun() {
			t = s.take()
			s.pump()
			s.mu.Unlock()
			continue
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		s.parked = append(s.parked, inbox)
		s.mu.Unlock()
		var ok bool
		if t, ok = s.park(inbox, idle); !ok {
			return
		}
	}
}

// workerIdle is how long a parked worker waits before it exits.
const workerIdle = time.Second

// park waits for a task, at most workerIdle on timer (the worker's own,
// stopped); false means exit.
func (s *scheduler) park(inbox chan task, timer *time.Timer) (task, bool) {
	timer.Reset(workerIdle)
	defer timer.Stop()
	select {
	case t, ok := <-inbox:
		return t, ok
	case <-timer.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.parked, inbox); i >= 0 {
		s.parked = slices.Delete(s.parked, i, i+1)
		return task{}, false
	}
	t, ok := <-inbox
	return t, ok
}

// finish ends l's running job; s.mu is held.
func (s *scheduler) finish(l *line) {
	l.running = false
	s.running--
	switch {
	case len(l.jobs) > 0:
		s.ready = append(s.ready, l) // to the back: keys take turns
	default:
		if l.key != "" {
			delete(s.keys, l.key)
		}
		if len(s.spare) < maxSpare {
			l.key = ""
			s.spare = append(s.spare, l)
		}
	}
	if s.running == 0 && s.queued == 0 {
		for _, c := range s.idle {
			close(c)
		}
		s.idle = nil
	}
}

func (s *scheduler) load() (running, queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.queued
}

// drain waits until no job runs or waits, or ctx ends.
func (s *scheduler) drain(ctx context.Context) error {
	s.mu.Lock()
	if s.running == 0 && s.queued == 0 {
		s.mu.Unlock()
		return nil
	}
	c := make(chan struct{})
	s.idle = append(s.idle, c)
	s.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close refuses new jobs, gives back those that never started and waits
// for the running ones. It is idempotent.
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	var back []*job
	for _, l := range s.ready {
		back = append(back, l.jobs...)
		l.jobs = nil
	}
	for _, l := range s.keys {
		if l.running {
			back = append(back, l.jobs...)
		}
		l.jobs = nil
	}
	s.ready = nil
	s.keys = make(map[string]*line)
	s.queued = 0
	for _, w := range s.parked {
		close(w)
	}
	s.parked = nil
	s.mu.Unlock()
	for _, j := range back {
		if j.d != nil {
			_ = j.d.Reject(true)
		}
	}
	s.wg.Wait()
}
