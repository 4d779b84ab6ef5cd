package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// Config configures a [CloudBus]. The zero value of every field but
// Transport works: [Open] fills the defaults, then reports every problem
// at once.
type Config struct {
	// Transport carries the messages; required. The caller owns it and
	// closes it after the bus.
	Transport driver.Transport

	// Node is the canonical UUID of this management node (or of a client
	// process). Default: a new random version-4 UUID.
	Node string

	// Prefix starts every queue name: <prefix>.message.<service>.<node>.
	// Default "cloudbus". Tests sharing one broker isolate themselves by
	// giving each its own prefix.
	Prefix string

	// Registry maps payload types to names. Default: message.NewRegistry().
	Registry *message.Registry

	// ClientOnly makes a bus that only calls through api.portal and reads
	// its own replies (service.Client): it declares its reply queue and
	// nothing else (no event queue bound to the broadcast fan-out, no
	// dead-letter queue), so it works with a broker user that may only
	// publish to the API entry and read its reply queue (see docs/operations.md's
	// broker permissions). It cannot serve, subscribe or broadcast.
	ClientOnly bool

	// Clock, optional, tells the cluster time that absolute deadlines are
	// written in (see [Clock]). With it, a message whose sender's
	// deadline passed while it waited anywhere is never run; without
	// it, only the time left travels and a receiver counts it from
	// arrival, so time spent in queues is not seen. Default: none.
	// service.Node sets its measured clock; processes in one process or
	// on one machine may use [LocalClock].
	Clock Clock

	// Logger receives the bus's logs; nil discards them.
	Logger *slog.Logger

	// Observer, optional, sees every send, call, delivery and reply; see
	// [Observer].
	Observer Observer
	// Tracer, optional, makes spans around sends, calls and handlers; see
	// [Tracer]. Without it the bus still carries the W3C trace context.
	Tracer Tracer

	// Delivery is the mode calls and one-way messages are sent in, unless
	// [WithDelivery] says otherwise; see [DeliveryMode]. Default
	// [Confirmed].
	Delivery DeliveryMode

	// Limits bound the bus's timeouts, sizes, concurrency and retries;
	// their fields read as the Config's own (cfg.Prefetch).
	Limits
}

// Limits are the bounds of a [CloudBus]: its timeouts, sizes,
// concurrency and retries. Every zero field takes the default its comment
// names; [Open] fills them and [Config.Validate] checks them. A
// service.Node takes them as its Config.Limits.
type Limits struct {
	// DefaultTimeout bounds a Call whose ctx has no deadline, so a sender
	// never hangs. Default 30 s: long enough for slow control-plane
	// operations, short enough that a lost reply surfaces.
	DefaultTimeout time.Duration

	// ReplyTimeout bounds publishing a reply after the handler returned.
	// Default 5 s.
	ReplyTimeout time.Duration

	// MaxMessageSize bounds an encoded envelope, checked before sending and
	// on receipt. Default message.DefaultMaxSize (4 MiB).
	MaxMessageSize int

	// MaxConcurrency bounds the handlers of one service running at once
	// on this bus. Each service has its own pool, so a handler that waits
	// for another service (the API portal for the owner's reply, one
	// service asking another) never waits for a slot held by its own
	// callers. Default 64; api.portal's pool is as large as its
	// consumers may hold (see Prefetch).
	MaxConcurrency int

	// MaxQueuePerResource bounds the messages about one resource waiting
	// behind the one running; a message that finds the queue full is
	// answered with message.ErrBusy. Default 64.
	MaxQueuePerResource int

	// Prefetch bounds the unacknowledged deliveries per consumer: the
	// messages held in memory, and the most a paused or cut-off node
	// keeps from its peers (on the shared api.portal queue) until the
	// broker takes them back. Default 32. A bus has one consumer per
	// queue, but on api.portal, whose handlers hold their messages until
	// the owner they forwarded them to answers: there it opens another
	// consumer while handlers running fill three quarters of what its
	// consumers may hold, up to 8, and cancels them again once they are
	// little used (docs/design.md, "Delivery rules"): a node then holds up
	// to 8 × Prefetch messages of api.portal, each up to MaxMessageSize.
	Prefetch int

	// MaxDeliveries bounds how many times a message of a service queue is
	// handed to a consumer that then crashes or gives it back before it
	// is moved to DeadLetterQueue: a message that kills every node that
	// takes it must not circle forever. A handler that returns an error or
	// panics does not count: a request is answered and acknowledged, a
	// one-way message is tried again up to RetryAttempts times.
	// Default 10; a negative value disables the limit.
	MaxDeliveries int

	// DeadLetterQueue receives poison messages and the one-way messages
	// that could not run (see RetryAttempts), with the reason in a header
	// (HeaderDeadReason). Default "<prefix>.dead". The bus declares it
	// (durable).
	DeadLetterQueue string

	// RetryBackoff is the pause before a one-way message whose handler
	// failed, with an error that does not say the message is wrong, is
	// given back to its queue for another attempt; it doubles per attempt
	// up to RetryBackoffMax. Default 100 ms. See the package
	// documentation, "Delivery guarantees".
	RetryBackoff time.Duration

	// RetryBackoffMax bounds the pause between two attempts of a one-way
	// message. Default 5 s.
	RetryBackoffMax time.Duration

	// RetryAttempts bounds the attempts of a one-way message whose
	// handler keeps failing: after that many, or once the next attempt
	// would start past its deadline, it goes to DeadLetterQueue with its
	// last error. Default 20 (with the default backoff, about 71 s of
	// pauses).
	RetryAttempts int

	// EventBuffer bounds the broadcast events waiting for subscribers;
	// when full, event consumption pauses (events wait in the broker).
	// Default 1024.
	EventBuffer int
}

func (c *Config) setDefaults() {
	if c.Node == "" {
		c.Node = message.NewUUID()
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Registry == nil {
		c.Registry = message.NewRegistry()
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = 30 * time.Second
	}
	if c.ReplyTimeout == 0 {
		c.ReplyTimeout = 5 * time.Second
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = message.DefaultMaxSize
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = 64
	}
	if c.MaxQueuePerResource == 0 {
		c.MaxQueuePerResource = 64
	}
	if c.Prefetch == 0 {
		c.Prefetch = 32
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = 10
	}
	if c.DeadLetterQueue == "" {
		c.DeadLetterQueue = c.Prefix + ".dead"
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = 5 * time.Second
	}
	if c.RetryAttempts == 0 {
		c.RetryAttempts = 20
	}
	if c.EventBuffer == 0 {
		c.EventBuffer = 1024
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem with the configuration at once. Call it
// after defaults are filled (Open does both).
func (c *Config) Validate() error {
	var errs []error
	if c.Transport == nil {
		errs = append(errs, errors.New("bus: config: Transport is required (use bus/membus for an in-memory bus)"))
	}
	if !message.IsCanonicalUUID(c.Node) {
		errs = append(errs, fmt.Errorf("bus: config: Node %q is not a canonical UUID (32 lower-case hex digits; see message.NormalizeUUID)", c.Node))
	}
	if !validPrefix(c.Prefix) {
		errs = append(errs, fmt.Errorf("bus: config: Prefix %q: use letters, digits, '_' and '-' in dot-separated segments, not starting with the broker's reserved \"amq\"", c.Prefix))
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"DefaultTimeout", c.DefaultTimeout}, {"ReplyTimeout", c.ReplyTimeout}, {"RetryBackoff", c.RetryBackoff}, {"RetryBackoffMax", c.RetryBackoffMax}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("bus: config: %s %s is negative", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxMessageSize", c.MaxMessageSize}, {"MaxConcurrency", c.MaxConcurrency},
		{"MaxQueuePerResource", c.MaxQueuePerResource}, {"Prefetch", c.Prefetch}, {"EventBuffer", c.EventBuffer}, {"RetryAttempts", c.RetryAttempts},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("bus: config: %s %d is negative", f.name, f.v))
		}
	}
	if c.Delivery != Confirmed && c.Delivery != Fast {
		errs = append(errs, fmt.Errorf("bus: config: Delivery %s: use bus.Confirmed or bus.Fast", c.Delivery))
	}
	if c.RetryBackoff > 0 && c.RetryBackoffMax > 0 && c.RetryBackoffMax < c.RetryBackoff {
		errs = append(errs, fmt.Errorf("bus: config: RetryBackoffMax %s is below RetryBackoff %s", c.RetryBackoffMax, c.RetryBackoff))
	}
	return errors.Join(errs...)
}
