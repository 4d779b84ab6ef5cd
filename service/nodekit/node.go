package nodekit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/dashboard"
	"github.com/cloudbus-go/cloudbus/service/metrics"
	"github.com/cloudbus-go/cloudbus/service/tracing"
)

// Config is a program's own part of a node: its name, its messages, its
// tables and its services. The operator's part is [Settings].
type Config struct {
	// Name names the program: in its tables (<base>_<Name>_*, see
	// [TableBase]), its broker connection and its messages. Lower-case
	// letters, digits and '_'. Required.
	Name string
	// Command is how an operator starts the program, for the message
	// that tells them to start it again. Default Name.
	Command string
	// Node is the node's UUID. Default: a new one.
	Node string
	// Registry names the program's message types. Default: a new one
	// (the services register their types when the node is created).
	Registry *message.Registry
	// Schema is the program's own tables, migrated before the services
	// are built. Optional.
	Schema *Schema
	// Services returns the node's services, given its environment.
	// Required.
	Services func(ctx context.Context, env Env) ([]service.Service, error)
	// Observer sees every message the bus sends and handles, besides
	// the node's own counters. Optional.
	Observer bus.Observer
	// Limits bound the node's bus; zero fields take the bus's defaults.
	Limits bus.Limits
	// Delivery is the mode the node's calls and one-way messages are sent
	// in by default; see bus.DeliveryMode. Default bus.Confirmed.
	Delivery bus.DeliveryMode
	// Notes are lines of the program's own printed after the node's
	// start-up facts, before it connects anywhere: "op log:  path", say.
	Notes []string
	// Stdout receives the lines an operator needs: the node's UUID, the
	// admin address, the masked bus and database URLs, and when it
	// serves, leaves and has left. Default os.Stdout.
	Stdout io.Writer
	// Logger receives the node's logs. Default: text on stderr at
	// Settings.LogLevel.
	Logger *slog.Logger
	// Dashboard adds the program's figures to the node's dashboard, at
	// GET / of the admin listener (package dashboard): its Resources,
	// Gauges and Counters (the kit adds "fence refusals"). Node,
	// Interval and Logger are the kit's. Optional.
	Dashboard dashboard.Config
}

// Node is a production node opened by [Open]: its database, broker
// connection, services and admin handler. Run it once, then Close it.
type Node struct {
	cfg      Config
	settings Settings
	log      *slog.Logger
	start    time.Time
	ln       net.Listener
	db       *Database
	fence    *sqlfence.Fence
	tr       *amqpbus.Transport
	node     *service.Node
	admin    *Admin
	dash     *dashboard.Dashboard
	metrics  *metrics.Metrics
	traces   *sdktrace.TracerProvider // nil: -trace none

	stopSweep context.CancelFunc
	swept     chan struct{}
	closed    bool
}

// Open opens what a node needs, in this order, and closes it all again
// if a step fails (a database or broker that does not answer yet is
// tried again until Settings.StartWait has passed since Open began): the admin listener; the database with its session
// settings (see [OpenDatabase]); the program's tables (cfg.Schema);
// the fence of the services' writes, whose expired message records a
// loop deletes every minute; the broker connection; the services; the
// node (not yet joined). It prints the node's UUID, admin address and
// masked URLs to cfg.Stdout. s must be valid ([Settings.Validate]).
func Open(ctx context.Context, cfg Config, s Settings) (_ *Node, err error) {
	if cfg.Name == "" || !tablePrefix.MatchString(cfg.Name) {
		return nil, fmt.Errorf("nodekit: Config.Name %q: give the program's name in lower-case letters, digits and '_'", cfg.Name)
	}
	if cfg.Services == nil {
		return nil, errors.New("nodekit: Config.Services is nil: give the function that returns the node's services")
	}
	if cfg.Command == "" {
		cfg.Command = cfg.Name
	}
	if cfg.Node == "" {
		cfg.Node = message.NewUUID()
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Registry == nil {
		cfg.Registry = message.NewRegistry()
	}
	if cfg.Logger == nil {
		level, _ := s.Level()
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	n := &Node{cfg: cfg, settings: s, log: cfg.Logger, start: time.Now()}
	defer func() {
		if err != nil {
			_ = n.Close()
		}
	}()
	id, ioLog := cfg.Node, cfg.Logger.With("node", cfg.Node) // the node and the services add their own node attribute
	hb := s.Heartbeat.WithDefaults()

	if n.ln, err = net.Listen("tcp", s.Listen); err != nil {
		return nil, fmt.Errorf("admin HTTP: %w; pick another -listen address (127.0.0.1:0 picks a free port)", err)
	}
	base := TableBase(s.Prefix)
	hbTable, tables := base+"_heartbeat", base+"_"+cfg.Name
	out := cfg.Stdout
	fmt.Fprintf(out, "node:    %s\n", id)
	fmt.Fprintf(out, "admin:   http://%s (GET / the dashboard, GET /healthz, GET /status, GET /metrics)\n", n.ln.Addr())
	qt, _ := amqpbus.ParseQueueType(s.QueueType)
	fmt.Fprintf(out, "bus:     %s (%s queues %s.message.<service>.%s)\n", amqpbus.MaskURLs(s.Bus), qt, s.Prefix, id)
	fmt.Fprintf(out, "db:      %s (tables %s, %s_*)\n", maskDB(s.DB), hbTable, tables)
	if s.Ring != "" && s.Ring != "table" {
		fmt.Fprintf(out, "ring:    %s (-ring; every node of the cluster must use the same)\n", s.Ring)
	}
	for _, line := range cfg.Notes {
		fmt.Fprintln(out, line)
	}

	wait := startWait{until: n.start.Add(s.StartWait), limit: s.StartWait, log: ioLog}
	if err = wait.do(ctx, "the database", dbTransient, func() (err error) {
		n.db, err = OpenDatabase(ctx, DatabaseConfig{URL: s.DB, HeartbeatTable: hbTable, EvictAfter: hb.EvictAfter,
			AllowNoIdleTimeout: s.AllowNoIdleTimeout, Logger: ioLog})
		return err
	}); err != nil {
		return nil, fmt.Errorf("%w; check -db", err)
	}
	if n.db.Shown != "" {
		ioLog.Info("nodekit: transactions left idle end after the eviction threshold", "setting", n.db.IdleTimeout, "shown", n.db.Shown)
	}
	if cfg.Schema != nil {
		found, err := cfg.Schema.Migrate(ctx, n.db.DB(), n.db.Dialect, tables)
		if err != nil {
			return nil, fmt.Errorf("%w; check -db and -prefix", err)
		}
		ioLog.Info("nodekit: tables ready", "tables", tables+"_*", "found_version", found)
	}
	if n.fence, err = sqlfence.Open(ctx, n.db.DB(), sqlfence.Config{Dialect: n.db.Dialect, HeartbeatTable: hbTable,
		Table: tables + "_fence", MaxAge: hb.EvictAfter, Logger: ioLog}); err != nil {
		return nil, fmt.Errorf("nodekit: %w; check -db", err)
	}
	sweepCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	n.stopSweep, n.swept = stop, make(chan struct{})
	go func() {
		defer close(n.swept)
		sweepRecords(sweepCtx, n.fence, time.Minute, cfg.Logger)
	}()

	if err = wait.do(ctx, "the broker", brokerTransient, func() (err error) {
		n.tr, err = amqpbus.Dial(ctx, s.Transport(cfg.Name+" "+id, ioLog))
		return err
	}); err != nil {
		return nil, fmt.Errorf("connect to the broker: %w; check -bus and that RabbitMQ runs", err)
	}
	n.admin = newAdmin(n.tr, s.Prefix, n.start, n.db, &beatStats{})
	if s.Pprof {
		n.admin.servePprof()
	}
	store := timed(n.db.Heartbeat, n.admin.beats)
	svcs, err := cfg.Services(ctx, Env{Node: id, DB: n.db.DB(), Dialect: n.db.Dialect, Tables: tables, Fence: n.fence,
		Store: store, Heartbeat: hb, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("nodekit: build the services: %w", err)
	}
	rg, err := NewRing(s.Ring)
	if err != nil {
		return nil, err
	}
	if err = n.openMetrics(); err != nil {
		return nil, err
	}
	obs := observers(n.admin, n.metrics, cfg.Observer)
	var tracer bus.Tracer
	if n.traces, err = tracing.NewProvider(ctx, tracing.ProviderConfig{Exporter: s.Trace, ServiceName: cfg.Name, Node: id, Writer: os.Stderr}); err != nil {
		return nil, fmt.Errorf("nodekit: -trace %s: %w", s.Trace, err)
	}
	if n.traces != nil {
		tracer = tracing.New(n.traces)
	}
	if n.node, err = service.NewNode(service.Config{
		Node: id, Prefix: s.Prefix, Transport: n.tr, Store: store, Registry: cfg.Registry, Ring: rg,
		Services: svcs, Heartbeat: s.Heartbeat, Limits: cfg.Limits, Delivery: cfg.Delivery, Observer: obs, Tracer: tracer, Logger: cfg.Logger,
	}); err != nil {
		return nil, err
	}
	n.admin.node = n.node
	n.metrics.SetNode(n.node)
	dc := cfg.Dashboard
	dc.Node, dc.Interval, dc.Logger = n.node, 0, cfg.Logger
	counters := dc.Counters
	dc.Counters = func() map[string]uint64 {
		c := map[string]uint64{}
		if counters != nil {
			maps.Copy(c, counters())
		}
		c["fence refusals"] = n.fence.Stats().Stale
		return c
	}
	if n.dash, err = dashboard.New(dc); err != nil {
		return nil, err
	}
	n.dash.Register(n.admin.mux)
	return n, nil
}

// Service returns the node itself.
func (n *Node) Service() *service.Node { return n.node }

// Transport returns the node's broker connection.
func (n *Node) Transport() *amqpbus.Transport { return n.tr }

// Database returns the node's database.
func (n *Node) Database() *Database { return n.db }

// Admin returns the admin handler, to add routes and status sections
// before [Node.Run].
func (n *Node) Admin() *Admin { return n.admin }

// Addr returns the admin listener's address.
func (n *Node) Addr() net.Addr { return n.ln.Addr() }

// Run serves the admin handler and runs the node until ctx ends (a
// signal: see [Main]), then leaves the cluster in order: out of every
// ring, its record deleted, its queues drained, its services stopped,
// its queues deleted. It prints when the node serves, leaves and has
// left. It returns nil after an orderly leave, or an error that says
// why the node stopped: it could not start, it was evicted by its
// peers (matching service.ErrEvicted), or it failed.
func (n *Node) Run(ctx context.Context) error {
	out, id := n.cfg.Stdout, n.cfg.Node
	srv := &http.Server{Handler: n.admin, ReadHeaderTimeout: 5 * time.Second}
	srv.RegisterOnShutdown(func() { _ = n.dash.Close() }) // ends the dashboards' live streams, which never idle
	served := make(chan error, 1)
	go func() { served <- srv.Serve(n.ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			n.log.Warn("close admin HTTP", "err", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			n.log.Warn("admin HTTP", "err", err)
		}
	}()

	ran := make(chan error, 1)
	go func() { ran <- n.node.Run(ctx) }()
	select {
	case <-n.node.Ready():
		fmt.Fprintf(out, "serving: %s in the ring (fingerprint %s), ready in %s; SIGTERM or Ctrl-C leaves in order\n",
			nodes(len(n.node.Members())), n.node.Fingerprint(), time.Since(n.start).Round(time.Millisecond))
	case err := <-ran:
		if ctx.Err() != nil {
			fmt.Fprintf(out, "stopped: %v while starting\n", context.Cause(ctx))
			return nil
		}
		return fmt.Errorf("start node %s: %w", id, err)
	}
	var runErr error
	select {
	case <-ctx.Done():
		fmt.Fprintf(out, "leaving: %v (signal again to quit at once)\n", context.Cause(ctx))
		left := time.Now()
		runErr = <-ran
		if runErr == nil {
			fmt.Fprintf(out, "left:    in %s\n", time.Since(left).Round(time.Millisecond))
		}
	case runErr = <-ran:
	}
	switch {
	case errors.Is(runErr, service.ErrEvicted):
		return fmt.Errorf("node %s was evicted by its peers (its heartbeat was older than -evict-after %s): "+
			"they own its resources now; start %s again to rejoin as a new node: %w", id, n.settings.evictAfter(), n.cfg.Command, service.ErrEvicted)
	case runErr != nil:
		return fmt.Errorf("node %s: %w", id, runErr)
	}
	return nil
}

// Close closes what Open opened, in reverse order: the node, the
// broker connection, the sweep, the database, the admin listener. It is
// idempotent.
func (n *Node) Close() error {
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	if n.node != nil {
		errs = append(errs, n.node.Close())
	}
	if n.dash != nil {
		errs = append(errs, n.dash.Close())
	}
	if n.tr != nil {
		errs = append(errs, n.tr.Close())
	}
	if n.traces != nil { // flushes the spans not yet exported, within 5 s
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, n.traces.Shutdown(sctx))
		cancel()
	}
	if n.stopSweep != nil {
		n.stopSweep()
		<-n.swept
	}
	if n.db != nil {
		errs = append(errs, n.db.Close())
	}
	if n.ln != nil {
		if err := n.ln.Close(); !errors.Is(err, net.ErrClosed) { // the server closed it already
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nodes returns "1 node" or "n nodes".
func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// maskDB masks a database URL's passwords, for the start-up lines.
func maskDB(raw string) string {
	u, err := sqlconn.ParseURL(raw, sqlconn.Auto)
	if err != nil {
		return sqlconn.MaskURL(raw)
	}
	return u.Masked
}

// sweepRecords deletes the fence's expired message records every period
// until ctx ends; a failed sweep is logged and tried again next period.
func sweepRecords(ctx context.Context, f *sqlfence.Fence, period time.Duration, log *slog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, period/2)
		n, err := f.Sweep(sctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("sweep expired message records", "err", err)
		case n > 0:
			log.Debug("swept expired message records", "deleted", n)
		}
	}
}
