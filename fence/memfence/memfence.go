// Package memfence is the in-memory twin of package sqlfence, for tests
// and single-process demos: the same claims, tokens and message records,
// kept in maps and checked against any heartbeat.Store (memstore, say).
// It passes the same conformance suite (fence/fencetest).
//
// A transaction here is a function that stages its writes and returns a
// commit function; [Fence.Do] applies it only if the claim still holds
// and records the reply with it, atomically; [Run] does so with a typed
// reply, recorded as JSON. A claimant waiting for a
// resource preempts its holder once the holder's heartbeat record stops
// being live; the holder's commit then fails with a [*fence.StaleError].
package memfence

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
)

// Config configures [New]; every zero field takes a default.
type Config struct {
	// MaxAge is how old the claimant's last beat may be for its claim to
	// hold. Default: heartbeat's default EvictAfter (3 s).
	MaxAge time.Duration
	// Retention is how long a message's reply is kept ([Fence.Sweep]).
	// Default 24 h.
	Retention time.Duration
	// MaxReply bounds a recorded reply in bytes. Default 1 MiB.
	MaxReply int
	// PollEvery is how often a claimant waiting for a resource checks
	// whether the holder's claim died. Default MaxAge/10.
	PollEvery time.Duration
}

// Fence is the in-memory fence. It is safe for concurrent use and holds
// no goroutine.
type Fence struct {
	members heartbeat.Store
	cfg     Config

	mu    sync.Mutex
	res   map[string]*resource
	once  map[string]*record
	stats fence.Counters
}

type resource struct {
	node  string
	epoch int64
	token fence.Token
	hold  *hold // the transaction holding the resource, if any
}

type hold struct {
	claim   fence.Claim
	revoked bool          // a waiter preempted it: its commit must fail
	done    chan struct{} // closed when it ends
}

type record struct {
	key     fence.Key
	done    bool
	reply   []byte
	at      time.Time
	running chan struct{} // closed when the first delivery ends
}

// New returns a fence whose claims hold while their node's record in
// members is live.
func New(members heartbeat.Store, cfg Config) *Fence {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = heartbeat.DefaultConfig().EvictAfter
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 24 * time.Hour
	}
	if cfg.MaxReply <= 0 {
		cfg.MaxReply = 1 << 20
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = cfg.MaxAge / 10
	}
	return &Fence{members: members, cfg: cfg, res: make(map[string]*resource), once: make(map[string]*record)}
}

// why says why c does not hold, or "" if it holds; an error if the
// store cannot say.
func (f *Fence) why(ctx context.Context, c fence.Claim) (string, error) {
	recs, err := f.members.List(ctx)
	if err != nil {
		return "", fmt.Errorf("memfence: check claim %s: %w", c, err)
	}
	for _, r := range recs {
		if r.Node == c.Node {
			return fence.StaleReason(c, true, r.Epoch, r.Age, f.cfg.MaxAge), nil
		}
	}
	return fence.StaleReason(c, false, 0, 0, f.cfg.MaxAge), nil
}

// Do runs fn guarded by w, like sqlfence.Fence.Do: w.Claim is checked and
// the resource held (other claimants wait), w.Key claimed (a concurrent
// delivery of the message waits; a finished one's reply is returned
// without running fn), then fn stages its writes and returns them as
// commit, which Do calls, with the reply recorded, only if the claim
// still holds and ctx has not ended (as a SQL transaction whose context
// ends is rolled back). If fn fails nothing is applied or recorded.
func (f *Fence) Do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tok fence.Token) (reply []byte, commit func(), err error)) ([]byte, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	reply, ran, err := f.do(ctx, w, fn)
	f.stats.Count(ran, err)
	return reply, err
}

// Stats returns what Do did so far: transactions run and committed,
// repeats answered with their recorded reply, stale claims refused.
func (f *Fence) Stats() fence.Stats { return f.stats.Stats() }

// do is Do once w is valid; ran says whether fn ran.
func (f *Fence) do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tok fence.Token) (reply []byte, commit func(), err error)) (_ []byte, ran bool, _ error) {
	var h *hold
	var tok fence.Token
	if !w.Claim.IsZero() {
		var err error
		if h, tok, err = f.acquire(ctx, w.Claim); err != nil {
			return nil, false, err
		}
	}
	var rec *record
	if !w.Key.IsZero() {
		r, reply, done, err := f.begin(ctx, w.Key)
		if err != nil || done {
			f.release(h, tok, false)
			return reply, false, err
		}
		rec = r
	}
	reply, commit, err := fn(ctx, tok)
	if err == nil && len(reply) > f.cfg.MaxReply && rec != nil {
		err = message.ErrTooLarge.WithDetails(fmt.Sprintf("memfence: the reply to message %s is %d bytes, over MaxReply %d; nothing was recorded", w.Key.ID, len(reply), f.cfg.MaxReply))
	}
	if err == nil && ctx.Err() != nil {
		// As a SQL transaction whose context ends: rolled back.
		err = fmt.Errorf("memfence: the transaction's context ended before it committed; nothing was applied: %w", context.Cause(ctx))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && h != nil && h.revoked {
		err = &fence.StaleError{Claim: w.Claim, Reason: "the claimant stalled past the end of its claim and another claimant took the resource over"}
	}
	if err != nil {
		if rec != nil {
			delete(f.once, w.Key.ID)
			close(rec.running)
		}
		f.releaseLocked(h, tok, false)
		return nil, true, err
	}
	if commit != nil {
		commit()
	}
	if rec != nil {
		rec.done, rec.reply, rec.at = true, append([]byte{}, reply...), time.Now()
		close(rec.running)
	}
	f.releaseLocked(h, tok, true)
	return reply, true, nil
}

// acquire waits until the resource is free (or its holder's claim died),
// checks c and holds the resource for it.
func (f *Fence) acquire(ctx context.Context, c fence.Claim) (*hold, fence.Token, error) {
	for {
		f.mu.Lock()
		r := f.res[c.Resource]
		if r == nil {
			r = &resource{}
			f.res[c.Resource] = r
		}
		if r.hold == nil {
			h := &hold{claim: c, done: make(chan struct{})}
			r.hold = h
			tok := r.token
			if r.node != c.Node || r.epoch != c.Epoch {
				tok++
			}
			f.mu.Unlock()
			reason, err := f.why(ctx, c)
			if err != nil || reason != "" {
				f.release(h, tok, false)
				if err != nil {
					return nil, 0, err
				}
				return nil, 0, &fence.StaleError{Claim: c, Reason: reason}
			}
			return h, tok, nil
		}
		other := r.hold
		f.mu.Unlock()
		t := time.NewTimer(f.cfg.PollEvery)
		select {
		case <-other.done:
		case <-ctx.Done():
			t.Stop()
			return nil, 0, fmt.Errorf("memfence: wait for %s, held by %s: %w", c.Resource, other.claim, ctx.Err())
		case <-t.C:
			if reason, err := f.why(ctx, other.claim); err == nil && reason != "" {
				f.mu.Lock()
				if r.hold == other {
					other.revoked = true
					r.hold = nil
					close(other.done)
				}
				f.mu.Unlock()
			}
		}
		t.Stop()
	}
}

func (f *Fence) release(h *hold, tok fence.Token, committed bool) {
	if h == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releaseLocked(h, tok, committed)
}

func (f *Fence) releaseLocked(h *hold, tok fence.Token, committed bool) {
	if h == nil || h.revoked {
		return
	}
	r := f.res[h.claim.Resource]
	if committed {
		r.node, r.epoch, r.token = h.claim.Node, h.claim.Epoch, tok
	}
	r.hold = nil
	close(h.done)
}

// begin claims k: a new pending record, or the finished one's reply, or
// a wait for the running one.
func (f *Fence) begin(ctx context.Context, k fence.Key) (*record, []byte, bool, error) {
	for {
		f.mu.Lock()
		rec := f.once[k.ID]
		if rec == nil {
			rec = &record{key: k, running: make(chan struct{})}
			f.once[k.ID] = rec
			f.mu.Unlock()
			return rec, nil, false, nil
		}
		if rec.key != k {
			f.mu.Unlock()
			return nil, nil, false, fence.Reused(k, rec.key.Type, rec.key.Hash)
		}
		if rec.done {
			reply := append([]byte{}, rec.reply...)
			f.mu.Unlock()
			return nil, reply, true, nil
		}
		running := rec.running
		f.mu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
			return nil, nil, false, fmt.Errorf("memfence: wait for the first delivery of message %s: %w", k.ID, ctx.Err())
		}
	}
}

// Holder returns who holds resource's token: the claimant and the token;
// ok is false if nobody ever claimed it.
func (f *Fence) Holder(resource string) (c fence.Claim, tok fence.Token, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.res[resource]
	if r == nil || r.token == 0 {
		return fence.Claim{Resource: resource}, 0, false
	}
	return fence.Claim{Resource: resource, Node: r.node, Epoch: r.epoch}, r.token, true
}

// Sweep deletes the records of messages finished longer than Retention
// ago and returns how many.
func (f *Fence) Sweep() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for id, rec := range f.once {
		if rec.done && time.Since(rec.at) > f.cfg.Retention {
			delete(f.once, id)
			n++
		}
	}
	return n
}

// Verify reports whether c holds now: nil, or a [*fence.StaleError]. In
// a transaction of [Fence.Do], call it just before a side effect outside
// the fence's records, as with sqlfence.Fence.Verify.
func (f *Fence) Verify(ctx context.Context, c fence.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	reason, err := f.why(ctx, c)
	if err != nil {
		return err
	}
	if reason != "" {
		return &fence.StaleError{Claim: c, Reason: reason}
	}
	return nil
}
