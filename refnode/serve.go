package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/rest"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

const serveUsage = `Usage: refnode serve -bus amqp://user:password@host:5672/ [flags]

Runs one management node in this process, joined to the cluster of every
node that uses the same broker, database and prefix. SIGTERM or Ctrl-C
leaves the cluster in order and exits 0.

Flags (each may also be set by the REFNODE_* variable shown; a flag wins):
%s  -api-listen addr   serve the REST API (JSON over HTTP: hosts, images,   REFNODE_API_LISTEN
                     VMs; see docs/rest.md) on addr, e.g. 127.0.0.1:8080
                     (none); 127.0.0.1:0 picks a free port
  -embedded n        run n nodes (1-9) in this process on an in-memory   REFNODE_EMBEDDED
                     bus and database instead of joining a cluster: no
                     -bus or -db; the REST API of each on -api-listen's
                     port and the next ones (127.0.0.1:8080 by default)
  -api-token t       require "Authorization: Bearer t" on every REST     REFNODE_API_TOKEN
                     request (none); never logged: prefer the variable
  -ping-interval d   how often a node pings the hosts it owns (10s)        REFNODE_PING_INTERVAL
  -vm-sweep d        how often a node checks the VMs it owns against the   REFNODE_VM_SWEEP
                     hypervisor and repairs their records (30s)

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
                     tests that count a node's goroutines; text even
                     with -pprof
  -test-hooks        serve POST /test/stall-vm-final-write?for=d on the    REFNODE_TEST_HOOKS
                     admin server (off): arms a one-shot stall, for d,
                     of the next VM operation after its hypervisor call
                     and before the write of its outcome (for=0
                     disarms); logs "test stall" at WARN: for fault
                     tests only
  -test-migrate-latency d  each simulated VM move between hosts takes d  REFNODE_TEST_MIGRATE_LATENCY
                     (0): for tests that kill a node mid-migration

Admin HTTP: GET /healthz (200 while serving), GET /livez and GET /readyz
(200 or 503, JSON checks: see docs/operations.md), GET /status (JSON).
`

// serveOptions are the parsed flags of refnode serve: the node kit's
// settings and refnode's own.
type serveOptions struct {
	nodekit.Settings
	pingInterval time.Duration
	opLog        string        // file, or "": none
	clockSkew    time.Duration // added to time.Now for heartbeat.Config.Now
	stallVMWrite time.Duration // -test-stall-vm-write
	stallVMFinal time.Duration // -test-stall-vm-final-write
	testPprof    bool          // -test-pprof
	testHooks    bool          // -test-hooks
	migrateLat   time.Duration // -test-migrate-latency: each hypervisor move takes this long
	vmSweep      time.Duration
	apiListen    string // -api-listen: "" serves no REST API
	apiToken     string // -api-token
	embedded     int    // -embedded: nodes in this process, 0: one node of a real cluster
}

// envPrefix starts the names of refnode's variables: REFNODE_BUS, …
const envPrefix = "REFNODE"

func parseServe(args []string, getenv func(string) string) (serveOptions, error) {
	fs := flag.NewFlagSet("refnode serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o serveOptions
	o.Settings.Register(fs, "refnode")
	fs.DurationVar(&o.pingInterval, "ping-interval", 10*time.Second, "")
	fs.StringVar(&o.opLog, "op-log", "", "")
	fs.DurationVar(&o.clockSkew, "clock-skew", 0, "")
	fs.DurationVar(&o.stallVMWrite, "test-stall-vm-write", 0, "")
	fs.DurationVar(&o.stallVMFinal, "test-stall-vm-final-write", 0, "")
	fs.BoolVar(&o.testPprof, "test-pprof", false, "")
	fs.BoolVar(&o.testHooks, "test-hooks", false, "")
	fs.DurationVar(&o.migrateLat, "test-migrate-latency", 0, "")
	fs.DurationVar(&o.vmSweep, "vm-sweep", 30*time.Second, "")
	fs.StringVar(&o.apiListen, "api-listen", "", "")
	fs.StringVar(&o.apiToken, "api-token", "", "")
	fs.IntVar(&o.embedded, "embedded", 0, "")
	if err := nodekit.Parse(fs, args, envPrefix, getenv); err != nil {
		return o, err
	}
	if o.embedded != 0 {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		err := validateEmbedded(&o, func(name string) bool { return set[name] })
		if fs.NArg() > 0 {
			err = errors.Join(err, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
		}
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if err := o.Settings.Validate(envPrefix); err != nil {
		errs = append(errs, err)
	}
	if o.Bus == "" {
		errs = append(errs, errors.New("run `refnode serve -embedded 3` to run a cluster in one process, or `refnode demo` to see one at work"))
	}
	if o.pingInterval <= 0 || o.vmSweep <= 0 {
		errs = append(errs, errors.New("-ping-interval and -vm-sweep must be positive"))
	}
	return o, errors.Join(errs...)
}

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	o, err := parseServe(args, getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, serveUsage, fmt.Sprintf(nodekit.FlagsHelp, envPrefix, "refnode"))
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "refnode serve: %v\nRun \"refnode serve -h\" for the flags.\n", err)
		return 2
	}
	level, _ := o.Level()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	run := serve
	if o.embedded > 0 {
		run = serveEmbedded
	}
	if err := run(ctx, o, stdout, log); err != nil {
		fmt.Fprintf(stderr, "refnode serve: %v\n", err)
		return 1
	}
	return 0
}

// serve runs one management node until ctx ends (a signal) or it fails,
// on the node kit: refnode wires only its own part, the services, their
// record store, the op log and the test hooks. It prints one line per
// fact a user needs to stdout and logs to log.
func serve(ctx context.Context, o serveOptions, stdout io.Writer, log *slog.Logger) error {
	id := message.NewUUID()
	var obs bus.Observer
	if o.opLog != "" {
		ol, err := openOpLog(o.opLog, id, opLogFlush, fmt.Sprintf("refnode serve, pid %d, clock skew %s", os.Getpid(), o.clockSkew))
		if err != nil {
			return fmt.Errorf("open the op log: %w; check -op-log", err)
		}
		defer func() {
			if err := ol.Close(); err != nil { // after the node stopped observing
				log.Warn("close op log", "err", err)
			}
		}()
		obs = ol
	}
	if o.clockSkew != 0 {
		skew := o.clockSkew
		o.Heartbeat.Now = func() time.Time { return time.Now().Add(skew) }
	}
	dbURL, err := sqlconn.ParseURL(o.DB, sqlconn.Auto)
	if err != nil {
		return fmt.Errorf("-db: %w", err)
	}
	hv, err := simhv.New(simhv.Config{Adopt: true, OpLatency: map[simhv.Op]time.Duration{simhv.OpMigrateVM: o.migrateLat}}) // one simulator per process: see simhv.Config.Adopt
	if err != nil {
		return err
	}
	var arm *stallArm // -test-hooks
	if o.testHooks {
		arm = &stallArm{log: log}
	}
	reg := message.NewRegistry()
	if err := api.Register(reg); err != nil {
		return err
	}
	var notes []string
	if o.opLog != "" {
		notes = append(notes, fmt.Sprintf("op log:  %s (one JSON line per message handled, refused or given back)", o.opLog))
	}
	if o.clockSkew != 0 {
		notes = append(notes, fmt.Sprintf("clock:   skewed by %s (-clock-skew, for fault tests)", o.clockSkew))
	}
	if arm != nil {
		notes = append(notes, "test:    hooks on the admin server (POST /test/stall-vm-final-write?for=d; -test-hooks, for fault tests)")
	}
	var apiLn net.Listener // -api-listen
	if o.apiListen != "" {
		if apiLn, err = net.Listen("tcp", o.apiListen); err != nil {
			return fmt.Errorf("REST API: %w; pick another -api-listen address (127.0.0.1:0 picks a free port)", err)
		}
		defer apiLn.Close() // once served, the server closes it; this covers a failed start
		note := fmt.Sprintf("api:     http://%s/v1/ (REST: hosts, images, VMs)", apiLn.Addr())
		if o.apiToken != "" {
			note += "; a bearer token is required"
		}
		notes = append(notes, note)
	}
	var (
		set     *services.Set
		records cloud.Store
	)
	n, err := nodekit.Open(ctx, nodekit.Config{
		Name: "refnode", Command: "refnode serve", Node: id, Registry: reg, Observer: obs, Notes: notes, Stdout: stdout, Logger: log,
		Dashboard: dashboardFigures(func() cloud.Store { return records }, func() *services.Set { return set }),
		Services: func(ctx context.Context, env nodekit.Env) ([]service.Service, error) {
			var err error
			records, err = sqldb.Open(ctx, &sqlconn.Pool{DB: env.DB, URL: dbURL}, sqldb.Config{
				Prefix: env.Tables, Fence: env.Fence, Logger: env.Logger.With("node", id)})
			if err != nil {
				return nil, fmt.Errorf("open the record store: %w; check -db", err)
			}
			scfg := services.Config{Store: records, Hypervisor: hv, PingInterval: o.pingInterval, VMSweepInterval: o.vmSweep, Logger: log}
			scfg.StallVMWrite = testStall(o.stallVMWrite, "after its fence check", log)
			scfg.StallVMFinalWrite = testStall(o.stallVMFinal, stallVMFinalWrite, log)
			if arm != nil {
				scfg.StallVMFinalWrite = chainStalls(scfg.StallVMFinalWrite, arm.hold)
			}
			if set, err = services.New(scfg); err != nil {
				return nil, err
			}
			return set.Services(), nil
		},
	}, o.Settings)
	if err != nil {
		return err
	}
	defer func() {
		if err := n.Close(); err != nil {
			log.Warn("close the node", "err", err)
		}
	}()
	admin := n.Admin()
	admin.Section("hosts", func() any { return hostStatus(set.Host.Stats()) })
	admin.Section("vms", func() any { return vmStatus(set.VM.Stats()) })
	if o.testPprof {
		admin.HandleFunc("GET /debug/pprof/goroutine", goroutineProfile) // more specific than -pprof's /debug/pprof/
	}
	if arm != nil {
		admin.Handle("/test/", withTestHooks(http.NotFoundHandler(), arm))
	}
	if apiLn != nil {
		stop, err := serveREST(ctx, n, reg, records, apiLn, o, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	return n.Run(ctx)
}

// serveREST serves the REST API on ln until stop: its messages go
// through api.portal from a client on the node's broker connection, its
// lists read records. stop ends the requests under way within 5 s.
func serveREST(ctx context.Context, n *nodekit.Node, reg *message.Registry, records cloud.Store, ln net.Listener, o serveOptions, log *slog.Logger) (stop func(), err error) {
	cl, err := service.NewClient(ctx, service.ClientConfig{Transport: n.Transport(), Prefix: o.Prefix, Registry: reg, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("REST API: open its client of the cluster: %w", err)
	}
	a, err := rest.New(rest.Config{Caller: cl, Store: records, Token: o.apiToken, Logger: log, Node: n.Service(), DeadLetters: n.Service()})
	if err != nil {
		_ = cl.Close()
		return nil, err
	}
	srv := a.Server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("close the REST API", "err", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			log.Warn("REST API", "err", err)
		}
		if err := cl.Close(); err != nil {
			log.Warn("close the REST API's client", "err", err)
		}
	}, nil
}

// goroutineProfile serves GET /debug/pprof/goroutine: the goroutine
// profile in runtime/pprof's text form ("goroutine profile: total N"
// first; ?debug=2 for every goroutine's stack). -test-pprof; with -pprof
// too, this route stays text and the node kit serves the others.
func goroutineProfile(w http.ResponseWriter, r *http.Request) {
	debug, err := strconv.Atoi(r.URL.Query().Get("debug"))
	if err != nil || debug < 1 {
		debug = 1
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_ = pprof.Lookup("goroutine").WriteTo(w, debug)
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
