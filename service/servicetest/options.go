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
	// Nodes is the number of nodes to start. Default 3.
	Nodes int
	// Services returns the services of the i-th node started, from 0; each
	// node gets its own instances.
	Services func(i int) []service.Service
	// Registry holds the payload types of every node and client. Default: new.
	Registry *message.Registry
	// Heartbeat sets the timing, merged field by field with
	// heartbeat.TestConfig() (beat 50 ms, fence 200 ms, evict 300 ms): zero
	// Interval and EvictAfter take TestConfig's; zero Lease and OpTimeout
	// take TestConfig's only if the merged Interval and EvictAfter are
	// TestConfig's, and are otherwise derived by package heartbeat. So
	// Heartbeat{EvictAfter: time.Second} fences after 900 ms. An invalid
	// result makes New fail.
	Heartbeat heartbeat.Config
	// Limits bound each node's bus (timeouts, concurrency, sizes): passed
	// to every node as service.Config.Limits; the bus fills each zero
	// field with its own default, field by field.
	Limits bus.Limits
	// Prefix of the queue names. Default "test".
	Prefix string
	// StoreClock is the heartbeat store's clock. Default time.Now.
	StoreClock func() time.Time
	// NewRing returns each node's ring. Default: the default ring.
	NewRing func() ring.Ring
	// Logger receives every node's logs. Default: discarded.
	Logger *slog.Logger
	// NoRejoin makes an evicted node stop instead of rejoining.
	NoRejoin bool
}

// withDefaults fills opts' defaults, or says what is invalid.
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
		errs = append(errs, fmt.Errorf("servicetest: Options.Heartbeat, merged with heartbeat.TestConfig(): %w", err))
	}
	if opts.Prefix == "" {
		opts.Prefix = "test"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return opts, errors.Join(errs...)
}

// mergeHeartbeat merges c with TestConfig as Options.Heartbeat says.
func mergeHeartbeat(c heartbeat.Config) heartbeat.Config {
	local := heartbeat.TestConfig()
	if c.Interval == 0 {
		c.Interval = local.Interval
	}
	if c.EvictAfter == 0 {
		c.EvictAfter = local.EvictAfter
	}
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
