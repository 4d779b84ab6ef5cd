package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// The pace of the failover load. Each VM is called once a second while
// all is well (about 300 calls a second for 300 VMs, half of what three
// nodes, RabbitMQ and PostgreSQL sharing two CPUs can answer), and again
// loadRetry after a call failed or while it is watched and has not yet
// answered from another node: a client retrying, and the measurement's
// resolution.
const (
	// loadCallTimeout bounds each call: a call that the portal of a
	// surviving node forwarded to the dead node's queue waits there until
	// the node is evicted (then it fails with node-left at once) or until
	// this timeout; so does a call whose reply died with the node.
	loadCallTimeout = time.Second
	loadPace        = time.Second
	loadRetry       = 20 * time.Millisecond
	// loadInFlight bounds the calls in flight, as a client's pool would.
	// It is well above a service's 64 handler slots on purpose: API
	// portal handlers hold a slot while they wait for the owner's reply,
	// and with one pool per node that starved the owner's handlers after
	// a crash until every call timed out (this test found it; each
	// service now has its own pool).
	loadInFlight = 256
)

// load is the client-mode caller of the failover measurement: one
// goroutine per VM calls VM operations about it through api.portal until
// stop: GetVm on most VMs, StartVm or StopVm (by the state the last reply
// showed) on every operatedEvery-th. From a mark on, it records each
// VM's first success answered by a node other than the excluded one, and
// counts the calls and the failed calls by error code. Safe for
// concurrent use.
type load struct {
	cl     *service.Client
	vms    []string
	slots  chan struct{} // loadInFlight
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	markAt  time.Time
	exclude string               // node whose answers do not count as first successes
	watch   map[string]bool      // VMs called every loadRetry until they answer from another node
	wake    chan struct{}        // closed by mark, so that watched VMs are called at once
	first   map[string]time.Time // VM -> first success after markAt by a node other than exclude
	last    map[string]answer    // VM -> its latest success, whenever
	win     window               // since markAt
}

// answer is one successful call: when its reply arrived and which node
// handled it.
type answer struct {
	at   time.Time
	node string
}

// window counts the calls of the load between two marks.
type window struct {
	start, end    time.Time
	calls, failed int
	byCode        map[string]int    // failed calls by error code
	example       map[string]string // one error text per code
}

// rate returns the calls per second of a window that ended.
func (w window) rate() float64 {
	if d := w.end.Sub(w.start); d > 0 {
		return float64(w.calls) / d.Seconds()
	}
	return 0
}

// String is "failed/calls, n/s (code n, …)".
func (w window) String() string {
	s := fmt.Sprintf("%d/%d, %.0f/s", w.failed, w.calls, w.rate())
	if len(w.byCode) > 0 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(w.byCode)) {
			parts = append(parts, fmt.Sprintf("%s %d", c, w.byCode[c]))
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// operatedEvery: every operatedEvery-th VM is started and stopped rather
// than read.
const operatedEvery = 5

// startLoad starts calling every VM of vms through cl; stop ends it.
func startLoad(ctx context.Context, cl *service.Client, vms []string) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{cl: cl, vms: vms, slots: make(chan struct{}, loadInFlight), cancel: cancel,
		markAt: time.Now(), first: map[string]time.Time{}, last: map[string]answer{}, wake: make(chan struct{})}
	l.win = newWindow(l.markAt)
	for i, vm := range vms {
		l.wg.Go(func() { l.callVM(ctx, vm, i%operatedEvery == 0) })
	}
	return l
}

func newWindow(start time.Time) window {
	return window{start: start, byCode: map[string]int{}, example: map[string]string{}}
}

// stop ends the callers and waits for them; it returns the counts since
// the last mark. It is idempotent.
func (l *load) stop() window {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.win.end.IsZero() {
		l.win.end = time.Now()
	}
	return l.win
}

// callVM calls vm until ctx ends: the first call after a random fraction of
// loadPace, so that the callers spread out, then loadPace after a success
// and loadRetry after a failure or while vm is watched; and at once when
// a mark starts watching it.
func (l *load) callVM(ctx context.Context, vm string, operate bool) {
	var state cloud.VMState // by the last reply; "": unknown
	pause := rand.N(loadPace)
	for {
		if !l.sleep(ctx, vm, pause) {
			return
		}
		var msg any = api.GetVm{UUID: vm}
		switch {
		case !operate || state == "":
		case state == cloud.VMCreated || state == cloud.VMStopped:
			msg = api.StartVm{UUID: vm}
		default: // running, or left transitional by a dead owner
			msg = api.StopVm{UUID: vm}
		}
		select {
		case <-ctx.Done():
			return
		case l.slots <- struct{}{}:
		}
		rep, err := service.Call[api.VmReply](ctx, l.cl, msg, bus.WithTimeout(loadCallTimeout))
		<-l.slots
		if ctx.Err() != nil {
			return
		}
		state = rep.VM.State // "" after an error: the outcome is unknown, read it next
		if l.record(vm, rep.Node, err) {
			pause = loadRetry
		} else {
			pause = loadPace
		}
	}
}

// sleep waits for d, or until a mark starts watching vm. It reports false
// if ctx ended.
func (l *load) sleep(ctx context.Context, vm string, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		l.mu.Lock()
		wake := l.wake
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-wake:
			l.mu.Lock()
			watched := l.watch[vm]
			l.mu.Unlock()
			if watched {
				return true
			}
		}
	}
}

// record notes the outcome of one call about vm, handled by node. It
// reports whether to call vm again soon: the call failed, or vm is watched
// and has not answered from another node than the excluded one yet.
func (l *load) record(vm, node string, err error) (soon bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.win.calls++
	if err != nil {
		l.win.failed++
		code := errorCode(err)
		l.win.byCode[code]++
		if _, ok := l.win.example[code]; !ok {
			l.win.example[code] = err.Error()
		}
		return true
	}
	l.last[vm] = answer{at: now, node: node}
	_, answered := l.first[vm]
	if !answered && node != l.exclude {
		l.first[vm] = now
		answered = true
	}
	return l.watch[vm] && !answered
}

// errorCode is the code of err's outermost message.Error, or "other".
func errorCode(err error) string {
	var me *message.Error
	if errors.As(err, &me) {
		return me.Code.String()
	}
	return "other"
}

// mark starts a new window at: first successes count from now on, except
// those handled by exclude (may be empty), and the VMs in watch are
// called every loadRetry until they answered from another node. It
// returns the counts of the window that ends.
func (l *load) mark(at time.Time, exclude string, watch []string) window {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.win
	prev.end = at
	l.markAt, l.exclude, l.first, l.win = at, exclude, map[string]time.Time{}, newWindow(at)
	l.watch = make(map[string]bool, len(watch))
	for _, vm := range watch {
		l.watch[vm] = true
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return prev
}

// firstAnswers reports when half of vms, and when the last of them,
// first answered since the mark from a node other than the excluded one,
// as durations after the mark. It fails naming how many have not answered
// yet.
func (l *load) firstAnswers(vms []string) (half, all time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var after []time.Duration
	var missing []string
	for _, vm := range vms {
		at, ok := l.first[vm]
		if !ok {
			missing = append(missing, vm)
			continue
		}
		after = append(after, at.Sub(l.markAt))
	}
	if len(missing) > 0 {
		return 0, 0, fmt.Errorf("%d of %d VMs have not answered from another node since the mark (e.g. %s)", len(missing), len(vms), missing[0])
	}
	if len(after) == 0 {
		return 0, 0, nil
	}
	slices.Sort(after)
	return after[(len(after)-1)/2], after[len(after)-1], nil
}

// settled checks that every VM answered after since, and, if owner is
// given, that its latest answer came from owner(vm).
func (l *load) settled(since time.Time, owner func(vm string) string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	late := 0
	for _, vm := range l.vms {
		a := l.last[vm]
		switch {
		case a.at.Before(since):
			late++
		case owner != nil && a.node != owner(vm):
			return fmt.Errorf("vm %s answered from node %s, but its owner on the agreed ring is %s", vm, a.node, owner(vm))
		}
	}
	if late > 0 {
		return fmt.Errorf("%d of %d VMs have not answered since %s", late, len(l.vms), since.Format("15:04:05.000"))
	}
	return nil
}
