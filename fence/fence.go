package fence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
)

// Claim is a node's claim to write a resource.
type Claim struct {
	// Resource is the resource's canonical UUID.
	Resource string
	// Node is the node's canonical UUID.
	Node string
	// Epoch is Node's life, from heartbeat.Store.Register.
	Epoch int64
}

// IsZero reports whether c is the zero Claim: no fencing.
func (c Claim) IsZero() bool { return c == Claim{} }

// Validate returns an error matching message.ErrBadRequest or message.ErrInvalidUUID.
func (c Claim) Validate() error {
	if c.Resource == "" || c.Node == "" || c.Epoch <= 0 {
		return message.ErrBadRequest.WithDetails(fmt.Sprintf(
			"fence: claim %+v is incomplete: it needs a resource, a node and the node's epoch; a handler takes it from fence.ClaimFrom(ctx)", c))
	}
	for _, id := range []string{c.Resource, c.Node} {
		if !message.IsCanonicalUUID(id) {
			return message.ErrInvalidUUID.WithDetails(fmt.Sprintf("fence: claim: %q is not a canonical UUID", id))
		}
	}
	return nil
}

// String returns "resource@node/epoch".
func (c Claim) String() string { return fmt.Sprintf("%s@%s/%d", c.Resource, c.Node, c.Epoch) }

// Token is a resource's fencing token; it grows when its claimant changes.
type Token int64

// Key identifies one message for idempotency.
type Key struct {
	// ID is the message's id, a canonical UUID.
	ID string
	// Type is the message's type name.
	Type string
	// Hash is the hex SHA-256 of the body.
	Hash string
}

// IsZero reports whether k is the zero Key: no idempotency.
func (k Key) IsZero() bool { return k == Key{} }

// NewKey returns the Key of a message.
func NewKey(id, typ string, body []byte) Key {
	sum := sha256.Sum256(body)
	return Key{ID: id, Type: typ, Hash: hex.EncodeToString(sum[:])}
}

// KeyOf returns r's Key.
func KeyOf(r *bus.Request) Key { return NewKey(r.ID(), r.Type(), busx.EnvelopeOf(r).Body) }

// Validate returns an error matching message.ErrBadRequest or message.ErrInvalidUUID.
func (k Key) Validate() error {
	if k.ID == "" || k.Type == "" || len(k.Hash) != 2*sha256.Size {
		return message.ErrBadRequest.WithDetails(fmt.Sprintf("fence: key %+v is incomplete; build it with fence.KeyOf or fence.NewKey", k))
	}
	if !message.IsCanonicalUUID(k.ID) {
		return message.ErrInvalidUUID.WithDetails(fmt.Sprintf("fence: key: message id %q is not a canonical UUID", k.ID))
	}
	return nil
}

// Guard says how one transaction is guarded: the claim that must hold
// for it to commit, and the key that makes it run once. It writes
// nothing itself; the fences (fence/sqlfence, fence/memfence) apply it.
type Guard struct {
	// Claim, unless zero, must hold for the transaction to commit.
	Claim Claim
	// Key, unless zero, gives later deliveries the first reply.
	Key Key
}

// Validate checks the set parts of w.
func (w Guard) Validate() error {
	var errs []error
	if !w.Claim.IsZero() {
		errs = append(errs, w.Claim.Validate())
	}
	if !w.Key.IsZero() {
		errs = append(errs, w.Key.Validate())
	}
	return errors.Join(errs...)
}

// For returns a handler's Write for r: ctx's claim on r's resource, and r's Key.
func For(ctx context.Context, r *bus.Request) Guard {
	w := Guard{Key: KeyOf(r)}
	if c, ok := ClaimFrom(ctx); ok && c.Resource == r.Resource() {
		w.Claim = c
	}
	return w
}

type claimKey struct{}

// WithClaim returns a copy of ctx carrying c.
func WithClaim(ctx context.Context, c Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

// ClaimFrom returns the claim ctx carries, if any.
func ClaimFrom(ctx context.Context) (Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(Claim)
	return c, ok
}

// ErrStale is matched by every [StaleError].
var ErrStale = errors.New("fence: stale claim")

// ErrKeyReused is matched, with message.ErrBadRequest, by the error for a
// reused message id. Retrying fails again.
var ErrKeyReused = errors.New("fence: message id reused for a different message")

// StaleError reports a write whose claim did not hold: nothing was
// written by this attempt, and retrying on the resource's current owner
// is safe. It does not say the operation failed: the error matches
// message.ErrNotOwner (retry class safe), so a caller that re-routes
// not_owner (service.Call does, and so does the API portal for its
// clients) sends the message again to the resource's new owner, where the
// write may then succeed. Only a caller that stops at this error sees it.
type StaleError struct {
	// Claim is the claim that failed.
	Claim Claim
	// Reason says why, for people, as far as the fence can tell from the
	// heartbeat store.
	Reason string
	// Claimant says, for people, what the claimant node itself knew of
	// its claim when the error left its handler: it left in order, its
	// peers evicted it, it rejoined with another epoch, its lease
	// expired. service.Node sets it, on a copy of the error its handler
	// returned, before the error goes on the wire; empty if nobody said.
	Claimant string
	// Cause is the database's error, if any.
	Cause error
}

// Error says which claim failed and why.
func (e *StaleError) Error() string {
	s := "fence: stale claim " + e.Claim.String() + ": " + e.why() + "; nothing was written: another node may own the resource now, retry on its owner"
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// why joins Reason and Claimant.
func (e *StaleError) why() string {
	if e.Claimant == "" {
		return e.Reason
	}
	return e.Reason + "; the claimant node says: " + e.Claimant
}

// Is matches [ErrStale].
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Unwrap returns message.ErrNotOwner, with Reason and Claimant as
// details, and Cause.
func (e *StaleError) Unwrap() []error {
	errs := []error{message.ErrNotOwner.WithDetails(e.why())}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// StaleReason says, for [StaleError.Reason], why c does not hold, from
// what the heartbeat store holds of c.Node: found says whether it holds a
// record, epoch is the record's epoch and age the age of its last beat.
// It returns "" if c holds by them: found, same epoch, age under maxAge.
// The store alone cannot tell an orderly leave from an eviction: both
// delete the record, and the reason says so.
func StaleReason(c Claim, found bool, epoch int64, age, maxAge time.Duration) string {
	switch {
	case !found:
		return fmt.Sprintf("the heartbeat record of node %s is gone: the node left in order (a leaving node deletes its record last) or its peers evicted it; the store cannot tell which", c.Node)
	case epoch != c.Epoch:
		return fmt.Sprintf("node %s has another life now (epoch %d, the claim's is %d): it was evicted and rejoined, or it restarted; the claim was an earlier life's", c.Node, epoch, c.Epoch)
	case age >= maxAge:
		return fmt.Sprintf("node %s last beat %s ago, longer than the fence's MaxAge %s: the node is stalled or cut off from the database, and its peers may evict it at any moment (its record is still there)",
			c.Node, age.Round(time.Millisecond), maxAge)
	}
	return ""
}

// Reused returns the [ErrKeyReused] error for k, whose id has type was
// and hash washash.
func Reused(k Key, was, washash string) error {
	detail := fmt.Sprintf("message id %s was first used for a %s with body hash %.12s, now for a %s with body hash %.12s; give every message its own id",
		k.ID, was, washash, k.Type, k.Hash)
	return fmt.Errorf("%w: %w", message.ErrBadRequest.WithDetails(detail), ErrKeyReused)
}

// Write is the old name of [Guard].
//
// Deprecated: use Guard; Write will be removed in the next release.
type Write = Guard
