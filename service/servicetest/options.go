package servicetest

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service"
)

// Options configure a test cluster. Every zero field takes a default.
type Options struct {
	// Nodes is the number of nodes to start. Default 3; negative is an
	// error.
	Nodes int
	// Services returns the services of the i-th node started (0-based);
	// called once per node, so each node gets its own instances.
	Services func(i int) []service.Service
	// Registry holds the payload types; shared by every node and client.
	// Default: a new registry.
	Registry *message.Registry
	// Heartbeat sets the timing, merged field by field with
	// heartbeat.LocalConfig() (beat every 50 ms, fence after 200 ms,
	// evict after 300 ms):
	//
	//   - every non-zero field is kept as given;
	//   - Interval and EvictAfter, when zero, take LocalConfig's;
	//   - Lease and OpTimeout, when zero, take LocalConfig's only if the
	//     merged Interval and EvictAfter are LocalConfig's. Otherwise they
	//     stay zero and the heartbeat package derives them from the merged
	//     values (Lease = max(EvictAfter-2×Interval, Interval), OpTimeout =
	//     Interval), so that setting only EvictAfter or only Interval never
	//     leaves a lease that contradicts them;
	//   - Now, when nil, stays nil: heartbeat's default, time.Now
	//     (virtual inside synctest).
	//
	// So Heartbeat{EvictAfter: time.Second} beats every 50 ms, fences
	// after 900 ms and evicts after 1 s. If the result is invalid (see
	// heartbeat.Config.Validate), New returns the validation error: for
	// instance Heartbeat{Interval: 200 * time.Millisecond} alone, since
	// LocalConfig's EvictAfter of 300 ms is less than twice that.
	Heartbeat heartbeat.Config
	// Limits bound each node's bus (timeouts, concurrency, sizes): passed
	// to every node as service.Config.Limits; the bus fills each zero
	// field with its own default, field by field.
	Limits bus.Limits
	// Prefix of the queue names. Default "test".
	Prefix string
	// StoreClock is the heartbeat store's clock, to simulate the
	// database's time. Default time.Now (virtual inside synctest).
	StoreClock func() time.Time
	// NewRing returns each node's ring copy. Default: the default ring.
	NewRing func() ring.Ring
	// Logger receives every node's logs. Default: discarded.
	Logger *slog.Logger
	// NoRejoin makes an evicted node stop for good instead of joining
	// again with a new epoch (service.Config.NoRejoin).
	NoRejoin bool
}

// withDefaults returns opts with its defaults filled, or an error naming
// what is invalid.
func (opts Options) withDefaults() (Options, error) {
	var errs []error
	if opts.Nodes < 0 {
		errs = append(errs, fmt.Errorf("servicetest: Options.Nodes %d is negative", opts.Nodes))
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Registry == nil {
		opts.Registry = message.NewRegistry()
	}
	opts.Heartbeat = mergeHeartbeat(opts.Heartbeat)
	if err := opts.Heartbeat.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("servicetest: Options.Heartbeat, merged with heartbeat.LocalConfig(): %w", err))
	}
	if opts.Prefix == "" {
		opts.Prefix = "test"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return opts, errors.Join(errs...)
}

// mergeHeartbeat merges the user's timing with heartbeat.LocalConfig(),
// by the rule documented on Options.Heartbeat.
func mergeHeartbeat(c heartbeat.Config) heartbeat.Config {
	local := heartbeat.LocalConfig()
	if c.Interval == 0 {
		c.Interval = local.Interval
	}
	if c.EvictAfter == 0 {
		c.EvictAfter = local.EvictAfter
	}
	// LocalConfig's Lease and OpTimeout fit only its own Interval and
	// EvictAfter; for any other timing heartbeat derives them.
	if c.Interval == local.Interval && c.EvictAfter == local.EvictAfter {
		if c.Lease == 0 {
			c.Lease = local.Lease
		}
		if c.OpTimeout == 0 {
			c.OpTimeout = local.OpTimeout
		}
	}
	return c // a nil Now is time.Now, heartbeat's default
}
