package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// The fault harness's load driver: one service.Client calls VM
// operations through api.portal at a steady rate, one call per VM at a
// time, each with a deadline and a unique x-op header, and records every
// call: when it was invoked and completed, its outcome and which node
// handled it. Together with the nodes' op logs (collectOps) it tells
// whether an operation ran after its caller had given up.

// driverOptions configure a driver; the zero value is 40 calls a second
// with a 5 s deadline.
type driverOptions struct {
	// Rate is the calls started per second. Default 40.
	Rate float64
	// Timeout is each call's deadline, from its invocation, set both on
	// its ctx and with bus.WithTimeout. Default 5 s.
	Timeout time.Duration
	// OperateEvery: every OperateEvery-th VM is started and stopped (by
	// the state its last reply showed) rather than read. Default 5; -1:
	// read only.
	OperateEvery int
}

// callRecord is one call of the driver.
type callRecord struct {
	OpID    string    // its x-op header
	Kind    string    // GetVm, StartVm, StopVm
	VM      string    // the VM it is about
	Invoke  time.Time // just before the call, on this process's clock
	Done    time.Time // when the call returned
	Outcome string    // "ok", a message.Code, or "unknown" for an error without one
	Node    string    // the node that handled it (the reply's Handling.Node), if ok
	Err     string    // the error's text, if any
}

// Deadline returns the call's deadline.
func (c callRecord) Deadline(timeout time.Duration) time.Time { return c.Invoke.Add(timeout) }

// Took returns how long the call took.
func (c callRecord) Took() time.Duration { return c.Done.Sub(c.Invoke) }

// vmDriver calls VMs through a client until stop. Safe for concurrent use.
type vmDriver struct {
	cl    *service.Client
	vms   []string
	opts  driverOptions
	run   string // random tag of this driver's op ids
	seq   atomic.Uint64
	stopc chan struct{}
	wg    sync.WaitGroup // the pacer and every call

	mu      sync.Mutex
	calls   []callRecord
	busy    map[string]bool          // VMs with a call in flight
	state   map[string]cloud.VMState // by the last reply; "": unknown
	next    int                      // round-robin position in vms
	skipped int                      // ticks when every VM was busy
	stopped bool
}

// startDriver starts calling vms through cl. The calls run on a context
// of their own, so that stop lets those in flight finish.
func startDriver(cl *service.Client, vms []string, opts driverOptions) *vmDriver {
	if opts.Rate == 0 {
		opts.Rate = 40
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.OperateEvery == 0 {
		opts.OperateEvery = 5
	}
	d := &vmDriver{cl: cl, vms: vms, opts: opts, run: randomHex(3), stopc: make(chan struct{}),
		busy: map[string]bool{}, state: map[string]cloud.VMState{}}
	d.wg.Go(d.pace)
	return d
}

// pace starts a call every 1/Rate, on the next VM in turn without a call
// in flight.
func (d *vmDriver) pace() {
	tick := time.NewTicker(time.Duration(float64(time.Second) / d.opts.Rate))
	defer tick.Stop()
	for {
		select {
		case <-d.stopc:
			return
		case <-tick.C:
		}
		vm, i, ok := d.pick()
		if !ok {
			continue
		}
		d.wg.Go(func() { d.call(vm, i) })
	}
}

// pick returns the next VM without a call in flight and marks it busy.
func (d *vmDriver) pick() (string, int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for range d.vms {
		i := d.next
		d.next = (d.next + 1) % len(d.vms)
		if vm := d.vms[i]; !d.busy[vm] {
			d.busy[vm] = true
			return vm, i, true
		}
	}
	d.skipped++
	return "", 0, false
}

// call makes one call about vms[i] and records it.
func (d *vmDriver) call(vm string, i int) {
	d.mu.Lock()
	state := d.state[vm]
	d.mu.Unlock()
	kind, msg := "GetVm", any(api.GetVm{UUID: vm})
	if d.opts.OperateEvery > 0 && i%d.opts.OperateEvery == 0 {
		switch state {
		case cloud.VMCreated, cloud.VMStopped:
			kind, msg = "StartVm", api.StartVm{UUID: vm}
		case cloud.VMRunning:
			kind, msg = "StopVm", api.StopVm{UUID: vm}
		}
	}
	op := fmt.Sprintf("op-%s-%06d", d.run, d.seq.Add(1))
	invoke := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d.opts.Timeout)
	rep, err := service.Call[api.VmReply](ctx, d.cl, msg, bus.WithTimeout(d.opts.Timeout), bus.WithHeader(HeaderOp, op))
	done := time.Now()
	cancel()
	rec := callRecord{OpID: op, Kind: kind, VM: vm, Invoke: invoke, Done: done, Outcome: outcomeOf(err)}
	if err != nil {
		rec.Err = err.Error()
	} else {
		rec.Node = rep.Node
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, rec)
	delete(d.busy, vm)
	d.state[vm] = rep.VM.State // "" after an error: read it next
}

// outcomeOf is "ok", the code of err's message.Error, or "unknown".
func outcomeOf(err error) string {
	if err == nil {
		return "ok"
	}
	var me *message.Error
	if errors.As(err, &me) {
		return me.Code.String()
	}
	return "unknown"
}

// stop stops starting calls and waits for those in flight (each ends by
// its deadline). Idempotent.
func (d *vmDriver) stop() {
	d.mu.Lock()
	if !d.stopped {
		d.stopped = true
		close(d.stopc)
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// Calls returns a copy of the calls recorded so far, in completion
// order.
func (d *vmDriver) Calls() []callRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]callRecord(nil), d.calls...)
}

// Skipped returns how many ticks found every VM busy.
func (d *vmDriver) Skipped() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.skipped
}

// answeredSince returns how many VMs have had no successful call
// completed after since, and one of them.
func (d *vmDriver) answeredSince(since time.Time) (missing int, example string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ok := map[string]bool{}
	for i := len(d.calls) - 1; i >= 0 && !d.calls[i].Done.Before(since); i-- {
		if d.calls[i].Outcome == "ok" {
			ok[d.calls[i].VM] = true
		}
	}
	for _, vm := range d.vms {
		if !ok[vm] {
			missing++
			example = vm
		}
	}
	return missing, example
}

// awaitAnswered waits until every VM had a successful call completed
// after since, and returns when the last of them did (as a time), or an
// error at the bound.
func (d *vmDriver) awaitAnswered(ctx context.Context, since time.Time, bound time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := poll(ctx, func() error {
		if n, vm := d.answeredSince(since); n > 0 {
			return fmt.Errorf("%d of %d VMs have not answered since %s (e.g. %s)", n, len(d.vms), since.Format("15:04:05.000"), vm)
		}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return d.recoveredAt(since), nil
}

// recoveredAt returns when the last VM first answered after since, from
// the records (zero if some VM has not).
func (d *vmDriver) recoveredAt(since time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	first := map[string]time.Time{}
	for _, c := range d.calls {
		if c.Outcome != "ok" || c.Done.Before(since) {
			continue
		}
		if t, ok := first[c.VM]; !ok || c.Done.Before(t) {
			first[c.VM] = c.Done
		}
	}
	var last time.Time
	for _, vm := range d.vms {
		t, ok := first[vm]
		if !ok {
			return time.Time{}
		}
		if t.After(last) {
			last = t
		}
	}
	return last
}
