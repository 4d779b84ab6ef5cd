package fence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

// Claim is a node's claim to write a resource: the resource and the
// node's membership record (its UUID and the epoch of its current life,
// as heartbeat.Store.Register returned it). A claim holds while that
// record is live in the heartbeat store; see the package documentation.
type Claim struct {
	// Resource is the resource's canonical UUID.
	Resource string
	// Node is the claiming node's canonical UUID.
	Node string
	// Epoch is the life of Node the claim belongs to.
	Epoch int64
}

// IsZero reports whether c is the zero Claim: no fencing.
func (c Claim) IsZero() bool { return c == Claim{} }

// Validate returns an error matching message.ErrBadRequest if c names no
// resource or node, or an epoch that is not positive, and one matching
// message.ErrInvalidUUID if a UUID is not canonical.
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

// Token is a fencing token: a number per resource that a successful check
// of a [Claim] returns. It is the same for every check by one node life
// and strictly greater each time the resource moves to another claimant
// (another node, or a later life of the same node). Write it beside your
// data if others must order writes by it; the check itself already
// refuses stale claimants.
type Token int64

// Key identifies one message for idempotency: its id, its type and a hash
// of its body. Two deliveries of one message have the same Key; a message
// id reused for a different message (other type or body) is refused with
// [ErrKeyReused].
type Key struct {
	// ID is the message id (the envelope's), a canonical UUID.
	ID string
	// Type is the message's type name.
	Type string
	// Hash is the hex SHA-256 of the message body.
	Hash string
}

// IsZero reports whether k is the zero Key: no idempotency.
func (k Key) IsZero() bool { return k == Key{} }

// NewKey returns the Key of a message with this id, type and body.
func NewKey(id, typ string, body []byte) Key {
	sum := sha256.Sum256(body)
	return Key{ID: id, Type: typ, Hash: hex.EncodeToString(sum[:])}
}

// KeyOf returns the Key of the message r carries. A message resent with
// the same id (bus.WithID, bus.WithRetry, a redelivery, a drain) has the
// same Key.
func KeyOf(r *bus.Request) Key { return NewKey(r.ID(), r.Type(), r.Envelope.Body) }

// Validate returns an error matching message.ErrBadRequest if k lacks a
// part, and one matching message.ErrInvalidUUID if its id is not a
// canonical UUID.
func (k Key) Validate() error {
	if k.ID == "" || k.Type == "" || len(k.Hash) != 2*sha256.Size {
		return message.ErrBadRequest.WithDetails(fmt.Sprintf("fence: key %+v is incomplete; build it with fence.KeyOf or fence.NewKey", k))
	}
	if !message.IsCanonicalUUID(k.ID) {
		return message.ErrInvalidUUID.WithDetails(fmt.Sprintf("fence: key: message id %q is not a canonical UUID", k.ID))
	}
	return nil
}

// Write says how one transaction is guarded: fenced by Claim (unless it
// is zero) and made idempotent by Key (unless it is zero). A handler gets
// both for the message it handles from [For].
type Write struct {
	// Claim fences the transaction: it commits only while the claim
	// holds. Zero: not fenced (a creation; see the package documentation).
	Claim Claim
	// Key makes the transaction idempotent: the first delivery runs and
	// its reply is recorded, every later one returns that reply. Zero: not
	// idempotent (a tracker's periodic write, say).
	Key Key
}

// Validate checks the parts of w that are set.
func (w Write) Validate() error {
	var errs []error
	if !w.Claim.IsZero() {
		errs = append(errs, w.Claim.Validate())
	}
	if !w.Key.IsZero() {
		errs = append(errs, w.Key.Validate())
	}
	return errors.Join(errs...)
}

// For returns the Write for the message r a handler runs with ctx: fenced
// by the node's claim on the message's resource (if the message is about
// one; service.Node puts the claim in the handler's ctx) and idempotent by
// the message's Key.
func For(ctx context.Context, r *bus.Request) Write {
	w := Write{Key: KeyOf(r)}
	if c, ok := ClaimFrom(ctx); ok && c.Resource == r.Resource() {
		w.Claim = c
	}
	return w
}

type claimKey struct{}

// WithClaim returns a copy of ctx carrying c; service.Node does it for
// every handler of a message about a resource.
func WithClaim(ctx context.Context, c Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

// ClaimFrom returns the claim ctx carries, if any: in a handler, the
// claim of the node that runs it on the message's resource.
func ClaimFrom(ctx context.Context) (Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(Claim)
	return c, ok
}

// ErrStale is matched (errors.Is) by every [StaleError].
var ErrStale = errors.New("fence: stale claim")

// ErrKeyReused is matched, with message.ErrBadRequest, by the error for a
// message id seen before with another type or body: the sender reused an
// id, which is a bug on its side. Retrying is pointless.
var ErrKeyReused = errors.New("fence: message id reused for a different message")

// StaleError is the error for a write whose claim no longer holds: the
// claimant's membership record is gone (it was evicted, or rejoined as a
// new life) or older than the fence's limit, so another node may own the
// resource. Nothing was written. It matches [ErrStale] and
// message.ErrNotOwner, whose retry class applies: the sender may retry on
// the resource's current owner (service.Node.Call re-routes; with
// bus.WithRetry the message keeps its id). The node that got it has lost
// ownership: it should stop writing for the resource, and it will learn
// from its heartbeat that it must rejoin.
type StaleError struct {
	// Claim is the claim that failed.
	Claim Claim
	// Reason says why, for people: "the record of node ... is gone".
	Reason string
	// Cause is a database error that came with it, if any (the
	// transaction was ended by the database while the claimant stalled).
	Cause error
}

// Error says which claim failed and why.
func (e *StaleError) Error() string {
	s := "fence: stale claim " + e.Claim.String() + ": " + e.Reason + "; nothing was written: another node may own the resource now, retry on its owner"
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Is matches [ErrStale].
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Unwrap returns message.ErrNotOwner (with the reason as details), so the
// error carries the not_owner code on the wire, and the cause, if any.
func (e *StaleError) Unwrap() []error {
	errs := []error{message.ErrNotOwner.WithDetails(e.Reason)}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// Reused returns the error for key k whose id was recorded for another
// message (type was, hash washash): it matches [ErrKeyReused] and
// message.ErrBadRequest.
func Reused(k Key, was, washash string) error {
	detail := fmt.Sprintf("message id %s was first used for a %s with body hash %.12s, now for a %s with body hash %.12s; give every message its own id",
		k.ID, was, washash, k.Type, k.Hash)
	return fmt.Errorf("%w: %w", message.ErrBadRequest.WithDetails(detail), ErrKeyReused)
}
