package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service"
)

const serveUsage = `Usage: refnode serve -bus amqp://user:password@host:5672/ [flags]

Runs one management node in this process, joined to the cluster of every
node that uses the same broker, database and prefix. SIGTERM or Ctrl-C
leaves the cluster in order and exits 0.

Flags (each may also be set by the REFNODE_* variable shown; a flag wins):
  -bus url           RabbitMQ broker, amqp:// or amqps:// (required)      REFNODE_BUS
  -db url            database of heartbeats and records                    REFNODE_DB
                     (sqlite:refnode.db; or postgres://…, mysql://…)
  -listen addr       admin HTTP address (127.0.0.1:0: a free port)         REFNODE_LISTEN
  -prefix p          queue prefix, and table names (cloudbus)              REFNODE_PREFIX
  -log-level l       debug, info, warn or error (info), logs on stderr     REFNODE_LOG_LEVEL
  -heartbeat d       heartbeat interval (500ms)                            REFNODE_HEARTBEAT
  -evict-after d     evict a node silent for this long (3s)                REFNODE_EVICT_AFTER
  -ping-interval d   how often a node pings the hosts it owns (10s)        REFNODE_PING_INTERVAL
  -vm-sweep d        how often a node checks the VMs it owns against the   REFNODE_VM_SWEEP
                     hypervisor and repairs their records (30s)
  -ring kind         ring of resource owners: table, a partition table,    REFNODE_RING
                     or consistent, buraksezer/consistent (table); every
                     node of a cluster must use the same

For audits and fault tests:
  -op-log path       append one JSON line per message this node handled,   REFNODE_OP_LOG
                     refused, gave back, retried or dead-lettered (none):
                     at, op, node, service_id,
                     type, id, resource, op_id (the caller's x-op header),
                     deadline, err; written out every 50ms
  -clock-skew d      offset this node's clock as cloudbus reads it by d    REFNODE_CLOCK_SKEW
                     (0), e.g. 1s or -1s: for fault tests only; the
                     node still measures its offset to the cluster clock
  -test-stall-vm-write d  stall the first VM operation for d after its   REFNODE_TEST_STALL_VM_WRITE
                     fence check, before its write (0: none); logs
                     "test stall" at WARN: for fault tests only
  -test-stall-vm-final-write d  the same, after the hypervisor call and  REFNODE_TEST_STALL_VM_FINAL_WRITE
                     before the write of its outcome
  -test-pprof        serve the goroutine profile on the admin server,      REFNODE_TEST_PPROF
                     GET /debug/pprof/goroutine[?debug=2] (off): for
                     tests that count a node's goroutines
  -test-hooks        serve POST /test/stall-vm-final-write?for=d on the    REFNODE_TEST_HOOKS
                     admin server (off): arms a one-shot stall, for d,
                     of the next VM operation after its hypervisor call
                     and before the write of its outcome (for=0
                     disarms); logs "test stall" at WARN: for fault
                     tests only

Admin HTTP: GET /healthz (200 while serving), GET /status (JSON).
`

// queuePrefix is a valid bus prefix (bus.Config.Prefix).
var queuePrefix = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64})*$`)

// serveOptions are the parsed flags of refnode serve.
type serveOptions struct {
	bus, db, listen, prefix string
	level                   slog.Level
	heartbeat               heartbeat.Config
	pingInterval            time.Duration
	opLog                   string        // file, or "": none
	clockSkew               time.Duration // added to time.Now for heartbeat.Config.Now
	stallVMWrite            time.Duration // -test-stall-vm-write
	stallVMFinal            time.Duration // -test-stall-vm-final-write
	testPprof               bool          // -test-pprof
	testHooks               bool          // -test-hooks
	vmSweep                 time.Duration
	ring                    string // -ring: table or consistent
}

func parseServe(args []string, getenv func(string) string) (serveOptions, error) {
	fs := flag.NewFlagSet("refnode serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := heartbeat.DefaultConfig()
	var o serveOptions
	var level string
	fs.StringVar(&o.bus, "bus", "", "")
	fs.StringVar(&o.db, "db", "sqlite:refnode.db", "")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "")
	fs.StringVar(&o.prefix, "prefix", bus.DefaultPrefix, "")
	fs.StringVar(&level, "log-level", "info", "")
	fs.DurationVar(&o.heartbeat.Interval, "heartbeat", def.Interval, "")
	fs.DurationVar(&o.heartbeat.EvictAfter, "evict-after", def.EvictAfter, "")
	fs.DurationVar(&o.pingInterval, "ping-interval", 10*time.Second, "")
	fs.StringVar(&o.opLog, "op-log", "", "")
	fs.DurationVar(&o.clockSkew, "clock-skew", 0, "")
	fs.DurationVar(&o.stallVMWrite, "test-stall-vm-write", 0, "")
	fs.DurationVar(&o.stallVMFinal, "test-stall-vm-final-write", 0, "")
	fs.BoolVar(&o.testPprof, "test-pprof", false, "")
	fs.BoolVar(&o.testHooks, "test-hooks", false, "")
	fs.DurationVar(&o.vmSweep, "vm-sweep", 30*time.Second, "")
	fs.StringVar(&o.ring, "ring", "table", "")
	err := parseFlags(fs, args, getenv, map[string]string{
		"bus": "REFNODE_BUS", "db": "REFNODE_DB", "listen": "REFNODE_LISTEN", "prefix": "REFNODE_PREFIX",
		"log-level": "REFNODE_LOG_LEVEL", "heartbeat": "REFNODE_HEARTBEAT", "evict-after": "REFNODE_EVICT_AFTER",
		"ping-interval": "REFNODE_PING_INTERVAL", "op-log": "REFNODE_OP_LOG", "clock-skew": "REFNODE_CLOCK_SKEW",
		"test-stall-vm-write": "REFNODE_TEST_STALL_VM_WRITE", "test-stall-vm-final-write": "REFNODE_TEST_STALL_VM_FINAL_WRITE",
		"vm-sweep": "REFNODE_VM_SWEEP", "test-pprof": "REFNODE_TEST_PPROF", "test-hooks": "REFNODE_TEST_HOOKS", "ring": "REFNODE_RING",
	})
	if err != nil {
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	switch {
	case o.bus == "":
		errs = append(errs, errors.New("-bus (or REFNODE_BUS) is required: the amqp:// URL of the RabbitMQ broker the nodes share, "+
			"e.g. -bus amqp://guest:guest@127.0.0.1:5672/. An in-memory bus cannot span processes; "+
			"run `refnode demo` to see a cluster in one process"))
	case !strings.HasPrefix(o.bus, "amqp://") && !strings.HasPrefix(o.bus, "amqps://"):
		errs = append(errs, fmt.Errorf("-bus %s is not an amqp:// or amqps:// URL", amqpbus.MaskURL(o.bus)))
	}
	if err := o.level.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("-log-level %q: use debug, info, warn or error", level))
	}
	o.heartbeat.OpTimeout = o.heartbeat.Interval
	if o.heartbeat.Interval <= 0 || o.heartbeat.EvictAfter <= 0 || o.pingInterval <= 0 || o.vmSweep <= 0 {
		errs = append(errs, errors.New("-heartbeat, -evict-after, -ping-interval and -vm-sweep must be positive"))
	} else if err := o.heartbeat.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("-heartbeat %s, -evict-after %s: %w", o.heartbeat.Interval, o.heartbeat.EvictAfter, err))
	}
	if _, err := sqlconn.ParseURL(o.db, sqlconn.Auto); err != nil {
		errs = append(errs, fmt.Errorf("-db: %w", err))
	}
	if !queuePrefix.MatchString(o.prefix) {
		errs = append(errs, fmt.Errorf("-prefix %q: use letters, digits, '_' and '-' in dot-separated segments", o.prefix))
	}
	if _, err := newRing(o.ring); err != nil {
		errs = append(errs, err)
	}
	return o, errors.Join(errs...)
}

// newRing returns an empty ring of the kind -ring names: "table", the
// default partition table, or "consistent", buraksezer/consistent with the
// library's defaults (docs/design.md, "The ring", compares them).
func newRing(kind string) (ring.Ring, error) {
	switch kind {
	case "table":
		return ring.New(ring.DefaultConfig())
	case "consistent":
		return ring.NewConsistent(ring.DefaultConsistentConfig())
	}
	return nil, fmt.Errorf("-ring %q: use table or consistent", kind)
}

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	o, err := parseServe(args, getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, serveUsage)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "refnode serve: %v\nRun \"refnode serve -h\" for the flags.\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.level}))
	if err := serve(ctx, o, stdout, log); err != nil {
		fmt.Fprintf(stderr, "refnode serve: %v\n", err)
		return 1
	}
	return 0
}

// closer is one thing serve opened, closed in reverse order at the end.
type closer struct {
	what  string
	close func() error
}

// serve runs one management node until ctx ends (a signal) or it fails.
// It prints one line per fact a user needs to stdout and logs to log.
func serve(ctx context.Context, o serveOptions, stdout io.Writer, log *slog.Logger) error {
	start := time.Now()
	id := message.NewUUID()
	ioLog := log.With("node", id) // the node and the services add their own node attribute
	counts := newCounters()
	var closers []closer
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i].close(); cerr != nil {
				log.Warn("close "+closers[i].what, "err", cerr)
			}
		}
	}()

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("admin HTTP: %w; pick another -listen address (127.0.0.1:0 picks a free port)", err)
	}
	closers = append(closers, closer{"admin listener", func() error {
		if err := ln.Close(); !errors.Is(err, net.ErrClosed) { // the server closed it already
			return err
		}
		return nil
	}})
	var obs bus.Observer = counts
	if o.opLog != "" {
		ol, err := openOpLog(o.opLog, id, opLogFlush, fmt.Sprintf("refnode serve, pid %d, clock skew %s", os.Getpid(), o.clockSkew))
		if err != nil {
			return fmt.Errorf("open the op log: %w; check -op-log", err)
		}
		closers = append(closers, closer{"op log", ol.Close}) // closed after the node stopped observing
		obs = bus.ObserverFunc(func(x bus.Observation) { counts.Observe(x); ol.Observe(x) })
	}
	if o.clockSkew != 0 {
		skew := o.clockSkew
		o.heartbeat.Now = func() time.Time { return time.Now().Add(skew) }
	}
	tables := tableBase(o.prefix)
	hbTable, recPrefix := tables+"_heartbeat", tables+"_refnode"
	fmt.Fprintf(stdout, "node:    %s\n", id)
	fmt.Fprintf(stdout, "admin:   http://%s (GET /healthz, GET /status)\n", ln.Addr())
	fmt.Fprintf(stdout, "bus:     %s (queues %s.message.<service>.%s)\n", amqpbus.MaskURL(o.bus), o.prefix, id)
	fmt.Fprintf(stdout, "db:      %s (tables %s, %s_*)\n", sqlconn.MaskURL(o.db), hbTable, recPrefix)
	if o.opLog != "" {
		fmt.Fprintf(stdout, "op log:  %s (one JSON line per message handled, refused or given back)\n", o.opLog)
	}
	if o.clockSkew != 0 {
		fmt.Fprintf(stdout, "clock:   skewed by %s (-clock-skew, for fault tests)\n", o.clockSkew)
	}
	if o.ring != "table" {
		fmt.Fprintf(stdout, "ring:    %s (-ring; every node of the cluster must use the same)\n", o.ring)
	}

	// Each store on its own pool, so that beats never wait for a
	// connection behind the records' work (see openStores).
	stores, err := openStores(ctx, o.db, o.heartbeat.EvictAfter, hbTable, recPrefix, ioLog)
	if err != nil {
		return err
	}
	closers = append(closers, closer{"stores", func() error { stores.close(log); return nil }})
	beats := &beatStats{}
	records := stores.records
	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: o.bus, ConnectionName: "refnode " + id, Logger: ioLog})
	if err != nil {
		return fmt.Errorf("connect to the broker: %w; check -bus and that RabbitMQ runs", err)
	}
	closers = append(closers, closer{"transport", tr.Close})

	hv, err := simhv.New(simhv.Config{Adopt: true}) // one simulator per process: see simhv.Config.Adopt
	if err != nil {
		return err
	}
	scfg := services.Config{Store: records, Hypervisor: hv, PingInterval: o.pingInterval, VMSweepInterval: o.vmSweep, Logger: log}
	scfg.StallVMWrite = testStall(o.stallVMWrite, "after its fence check", log)
	var arm *stallArm // -test-hooks
	if o.testHooks {
		arm = &stallArm{log: log}
		fmt.Fprintf(stdout, "test:    hooks on the admin server (POST /test/stall-vm-final-write?for=d; -test-hooks, for fault tests)\n")
	}
	scfg.StallVMFinalWrite = testStall(o.stallVMFinal, stallVMFinalWrite, log)
	if arm != nil {
		scfg.StallVMFinalWrite = chainStalls(scfg.StallVMFinalWrite, arm.hold)
	}
	set, err := services.New(scfg)
	if err != nil {
		return err
	}
	reg := message.NewRegistry()
	if err := api.Register(reg); err != nil {
		return err
	}
	rg, err := newRing(o.ring)
	if err != nil {
		return err
	}
	node, err := service.NewNode(service.Config{
		Node:      id,
		Prefix:    o.prefix,
		Transport: tr,
		Store:     timedStore{Store: stores.hb, beats: beats},
		Registry:  reg,
		Ring:      rg,
		Services:  set.Services(),
		Heartbeat: o.heartbeat,
		Observer:  obs,
		Logger:    log,
	})
	if err != nil {
		return err
	}

	// The message records older than their retention go, every minute.
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		sweepRecords(sweepCtx, records.Fence(), time.Minute, log)
	}()
	closers = append(closers, closer{"message record sweeper", func() error { stopSweep(); <-swept; return nil }})

	admin := newAdmin(node, tr, set, counts, o.prefix, start, &dbWatch{heartbeat: stores.hbPool.DB, records: stores.recPool.DB, beats: beats})
	if o.testPprof {
		admin = withGoroutineProfile(admin)
	}
	if arm != nil {
		admin = withTestHooks(admin, arm)
	}
	srv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	closers = append(closers, closer{"admin HTTP", func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	}})

	// Run leaves in order when ctx ends: out of every ring (broadcast),
	// record deleted, queues drained, services stopped, queues deleted.
	ran := make(chan error, 1)
	go func() { ran <- node.Run(ctx) }()
	select {
	case <-node.Ready():
		fmt.Fprintf(stdout, "serving: %s in the ring (fingerprint %s), ready in %s; SIGTERM or Ctrl-C leaves in order\n",
			nodes(len(node.Members())), node.Fingerprint(), time.Since(start).Round(time.Millisecond))
	case err := <-ran:
		if ctx.Err() != nil {
			fmt.Fprintf(stdout, "stopped: %v while starting\n", context.Cause(ctx))
			return nil
		}
		return fmt.Errorf("start node %s: %w", id, err)
	}
	var runErr error
	select {
	case <-ctx.Done():
		fmt.Fprintf(stdout, "leaving: %v (signal again to quit at once)\n", context.Cause(ctx))
		left := time.Now()
		runErr = <-ran
		if runErr == nil {
			fmt.Fprintf(stdout, "left:    in %s\n", time.Since(left).Round(time.Millisecond))
		}
	case runErr = <-ran:
	}
	switch {
	case errors.Is(runErr, service.ErrEvicted):
		return fmt.Errorf("node %s was evicted by its peers (its heartbeat was older than -evict-after %s): "+
			"they own its resources now; start refnode serve again to rejoin as a new node", id, o.heartbeat.EvictAfter)
	case runErr != nil:
		return fmt.Errorf("node %s: %w", id, runErr)
	}
	return nil
}

// nodes returns "1 node" or "n nodes".
func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// withGoroutineProfile serves h, and GET /debug/pprof/goroutine: the
// goroutine profile in runtime/pprof's text form ("goroutine profile:
// total N" first; ?debug=2 for every goroutine's stack). -test-pprof.
func withGoroutineProfile(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /debug/pprof/goroutine", func(w http.ResponseWriter, r *http.Request) {
		debug, err := strconv.Atoi(r.URL.Query().Get("debug"))
		if err != nil || debug < 1 {
			debug = 1
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_ = pprof.Lookup("goroutine").WriteTo(w, debug)
	})
	return mux
}

// tableBase turns a queue prefix into the start of table names: lower
// case, characters other than letters and digits replaced by '_', and a
// long prefix shortened with a hash, so that "cloudbus" gives the tables
// cloudbus_heartbeat and cloudbus_refnode_*, and clusters with different
// prefixes never share tables.
func tableBase(prefix string) string {
	b := []byte(strings.ToLower(prefix))
	for i, c := range b {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	s := string(b)
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	if len(s) > 24 {
		sum := sha256.Sum256([]byte(prefix))
		s = s[:15] + "_" + hex.EncodeToString(sum[:4])
	}
	return s
}

// idleTxTimeout bounds how long a transaction may stay open between two
// statements to d, unless the URL sets it: a process paused inside a
// fenced transaction (or cut from the database) holds its resources'
// token rows, and the new owners wait for the database to end it (see
// package fence). On PostgreSQL it sets idle_in_transaction_session_timeout
// (milliseconds, at least 1 s); on MariaDB (mariaDB true),
// idle_transaction_timeout (whole seconds, rounded up). MySQL has no
// such setting (innodb_lock_wait_timeout bounds the new owner's wait
// there), and SQLite needs none: a dead process's lock dies with it.
func idleTxTimeout(dbURL string, d time.Duration, mariaDB bool) string {
	u, err := sqlconn.ParseURL(dbURL, sqlconn.Auto)
	if err != nil {
		return dbURL
	}
	switch {
	case u.Dialect == sqlconn.Postgres && !strings.Contains(dbURL, "idle_in_transaction_session_timeout"):
		pu, err := url.Parse(dbURL)
		if err != nil || (pu.Scheme != "postgres" && pu.Scheme != "postgresql") {
			return dbURL
		}
		q := pu.Query()
		q.Set("idle_in_transaction_session_timeout", strconv.FormatInt(max(d.Milliseconds(), 1000), 10))
		pu.RawQuery = q.Encode()
		return pu.String()
	case u.Dialect == sqlconn.MySQL && mariaDB && !strings.Contains(dbURL, "idle_transaction_timeout"):
		// The driver sets a parameter it does not know as a session
		// variable on every connection; on MySQL this one would fail
		// the connection, hence the check of the server first.
		seconds := strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
		if strings.HasPrefix(dbURL, "mysql://") {
			pu, err := url.Parse(dbURL)
			if err != nil {
				return dbURL
			}
			q := pu.Query()
			q.Set("idle_transaction_timeout", seconds)
			pu.RawQuery = q.Encode()
			return pu.String()
		}
		cfg, err := mysql.ParseDSN(dbURL)
		if err != nil {
			return dbURL
		}
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["idle_transaction_timeout"] = seconds
		return cfg.FormatDSN()
	}
	return dbURL
}

// serverIsMariaDB reports whether dbURL names a MySQL-dialect database
// served by MariaDB (its VERSION() says so), within 10 s; false for other
// dialects and if the server cannot be asked (opening the stores then
// says why).
func serverIsMariaDB(ctx context.Context, dbURL string) bool {
	u, err := sqlconn.ParseURL(dbURL, sqlconn.Auto)
	if err != nil || u.Dialect != sqlconn.MySQL {
		return false
	}
	p, err := sqlconn.Open(sqlconn.Config{URL: dbURL, MaxOpenConns: 1})
	if err != nil {
		return false
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var version string
	if err := p.DB.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return false
	}
	return strings.Contains(strings.ToLower(version), "mariadb")
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

// testStall returns a hook that stalls the first VM operation of the
// process for d, logging "test stall" at WARN where; nil for d = 0.
func testStall(d time.Duration, where string, log *slog.Logger) func(ctx context.Context, vm string) {
	if d <= 0 {
		return nil
	}
	var once sync.Once
	return func(ctx context.Context, vm string) {
		once.Do(func() {
			log.Warn("test stall: holding a VM write "+where, "vm", vm, "for", d)
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			log.Warn("test stall: over", "vm", vm)
		})
	}
}
