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
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// Options configure a test cluster. Every zero field takes a default.
type Options struct {
	// Nodes is the number of nodes to start. Default 3.
	Nodes int
	// Services returns the services of the i-th node started, from 0,
	// given that node's environment (see [nodekit.Env]: on SQL, its
	// database pool, fence and table prefix); each node gets its own
	// instances. It is called once per node, before the node starts.
	Services func(i int, env nodekit.Env) []service.Service
	// Database says where the heartbeat records, the fence and the
	// services' tables live:
	//
	//	""                       in memory (heartbeat/memstore); Env.DB and Env.Fence are nil
	//	"sqlite"                 a SQLite file in a temporary directory, removed by Close
	//	"postgres://..."         that PostgreSQL database (or postgresql://)
	//	"mysql://..." or a DSN   that MySQL/MariaDB database, e.g. "root@tcp(127.0.0.1:3306)/test"
	//
	// On PostgreSQL and MySQL the cluster names every table it creates
	// with a random prefix ([Database].Prefix) and Close drops every table
	// whose name starts with it, the services' own included. A cluster on
	// SQL runs in real time: see the package documentation. Default "".
	Database string
	// Schema, if set, is the services' own tables: each node migrates
	// them when it is added, as a production node does when it starts,
	// with Env.Tables as their prefix. It needs a Database.
	Schema *nodekit.Schema
	// Registry holds the payload types of every node and client. Default: new.
	Registry *message.Registry
	// Heartbeat sets the timing, merged field by field with a base: in
	// memory heartbeat.TestConfig() (beat 50 ms, lease 200 ms, evict
	// 300 ms), on SQL the slower [SQLHeartbeat] (beat 100 ms, lease
	// 800 ms, evict 1 s). Zero Interval and EvictAfter take the base's;
	// zero Lease and OpTimeout take the base's only if the merged Interval
	// and EvictAfter are the base's, and are otherwise derived by package
	// heartbeat. So, in memory, Heartbeat{EvictAfter: time.Second} fences
	// after 900 ms. An invalid result makes New fail.
	Heartbeat heartbeat.Config
	// Limits bound each node's bus (timeouts, concurrency, sizes): passed
	// to every node as service.Config.Limits; the bus fills each zero
	// field with its own default, field by field.
	Limits bus.Limits
	// Prefix of the queue names. Default "test".
	Prefix string
	// StoreClock is the in-memory heartbeat store's clock. Default
	// time.Now. On SQL the database's clock stamps the beats: setting it
	// there is an error.
	StoreClock func() time.Time
	// NewRing returns each node's ring. Default: the default ring.
	NewRing func() ring.Ring
	// Logger receives every node's logs. Default: discarded.
	Logger *slog.Logger
	// Tracer, optional, is every node's and client's bus.Tracer (see
	// package service/tracing).
	Tracer bus.Tracer
	// NoRejoin makes an evicted node stop instead of rejoining.
	NoRejoin bool
	// NoSessionLocks turns the nodes' session locks off
	// (heartbeat.Config.SessionLocks, which the cluster sets otherwise,
	// as service/nodekit does for a production node). With them, a node
	// [Cluster.Kill] crashes loses its session at once and a peer evicts
	// it once its beat is a quarter Interval late; without them, only
	// after EvictAfter, as a node frozen or cut off from the store.
	NoSessionLocks bool
}

// SQLHeartbeat returns the base timing of a cluster on SQL (see
// [Options].Heartbeat): heartbeat.TestConfig's shape, slowed so that a
// beat held up by another node's SQLite write, a checkpoint or a busy
// test machine is not taken for a dead node.
func SQLHeartbeat() heartbeat.Config {
	return heartbeat.Config{
		Interval:   100 * time.Millisecond, // ten beats a second per node
		Lease:      800 * time.Millisecond, // fence after eight missed beats...
		EvictAfter: time.Second,            // ...two beats before peers may evict
		OpTimeout:  250 * time.Millisecond, // a statement may wait out another node's write
	}
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
	base, baseName := heartbeat.TestConfig(), "heartbeat.TestConfig()"
	if opts.Database != "" {
		base, baseName = SQLHeartbeat(), "servicetest.SQLHeartbeat()"
		if opts.StoreClock != nil {
			errs = append(errs, errors.New("servicetest: Options.StoreClock is for the in-memory store: on SQL the database's clock stamps the beats; leave it nil"))
		}
	} else if opts.Schema != nil {
		errs = append(errs, errors.New("servicetest: Options.Schema needs tables: set Options.Database (\"sqlite\", say)"))
	}
	opts.Heartbeat = mergeHeartbeat(opts.Heartbeat, base)
	opts.Heartbeat.SessionLocks = !opts.NoSessionLocks
	if err := opts.Heartbeat.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("servicetest: Options.Heartbeat, merged with %s: %w", baseName, err))
	}
	if opts.Prefix == "" {
		opts.Prefix = "test"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return opts, errors.Join(errs...)
}

// mergeHeartbeat merges c with base as Options.Heartbeat says.
func mergeHeartbeat(c, base heartbeat.Config) heartbeat.Config {
	if c.Interval == 0 {
		c.Interval = base.Interval
	}
	if c.EvictAfter == 0 {
		c.EvictAfter = base.EvictAfter
	}
	if c.Interval == base.Interval && c.EvictAfter == base.EvictAfter {
		if c.Lease == 0 {
			c.Lease = base.Lease
		}
		if c.OpTimeout == 0 {
			c.OpTimeout = base.OpTimeout
		}
	}
	return c // a nil Now is time.Now, heartbeat's default
}
