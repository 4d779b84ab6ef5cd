// Command refnode is the reference management node of cloudbus: VM, host
// and image services on the SDK, as a third party would build them.
//
// Usage:
//
//	refnode [demo] [-v] [-latency d] [-timeout d]
//	refnode serve -bus amqp://… [-db url] [-listen addr] [-prefix p] …
//	refnode ctl [-bus amqp://…] COMMAND [args]
//	refnode bench [-embedded n | -api urls] [-vms n] [-concurrency c] [-kill-after d]
//	refnode scale [-nodes n]
//	refnode help
//
// With no arguments, or "demo", refnode runs a short scripted demo: three
// management nodes in one process on the in-memory bus, hosts, an image
// and VMs added and operated through the ring and api.portal, one failing
// hypervisor call, then one node killed without a goodbye and its hosts
// and VMs taken over by the others. It prints which node handled each
// message and why, and exits 0.
//
// "serve" runs one management node per process: RabbitMQ carries the
// messages (-bus), and a database (-db: SQLite by default, or PostgreSQL
// or MySQL) holds the heartbeat records and the host, image and VM
// records, so nodes started on one or many machines with the same broker,
// database and prefix form one cluster. It prints the node's UUID, its
// admin HTTP address (GET /healthz, /livez, /readyz, /status, /metrics) and the masked bus and
// database URLs, and leaves the cluster in order on SIGTERM or Ctrl-C.
//
// "ctl" drives a running cluster through api.portal, as a client that is
// not a node: add hosts and images, create, start, stop, reboot, destroy
// and read VMs; it prints each reply as one line of JSON.
//
// "bench" creates and starts VMs through the REST API of an embedded
// cluster (or a running one, -api), C at a time, and prints throughput,
// latency percentiles, errors by code, failed attempts and each node's
// share of the work; -kill-after kills a node during the run. "scale"
// runs 30 nodes (-nodes) in one process and times how every ring follows a join,
// a leave and a kill, with the heap per node and the heartbeat store's
// calls per second.
//
// refnode reads its flags and, for flags not given, the REFNODE_*
// variables named in the help (REFNODE_BUS, REFNODE_DB, REFNODE_LATENCY,
// …). It never reads the CLOUDBUS_* variables of the test suites.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, a second one has its default effect: quit
	// at once, without waiting for an orderly leave.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

const usage = `refnode: the reference management node of cloudbus.

Usage:
  refnode [demo] [flags]   run a scripted 3-node demo in one process (the default)
  refnode serve            run one management node per process, on RabbitMQ and a database
                           (serve -embedded 3: three nodes in this process, each with a REST API)
  refnode ctl              drive a running cluster: its REST API (ctl vm list, ctl nodes, ...)
                           or api.portal on its broker (ctl start-vm UUID, ...)
  refnode bench            create and start VMs through the REST API, C at a time, and
                           print throughput, latency percentiles, errors and retries
  refnode scale            run 30 nodes in this process (or -processes n serve processes) and
                           time how every ring follows a join, a leave and a kill
  refnode help             show this help

"refnode serve -h" and "refnode ctl -h" list their flags (REFNODE_BUS, REFNODE_DB, …).

Demo flags (each may also be set by the REFNODE_* variable shown; a flag wins):
  -v            debug logs on stderr, timings and full errors      REFNODE_VERBOSE
  -latency d    simulated hypervisor latency per operation (20ms)  REFNODE_LATENCY
  -timeout d    give up after this long (25s)                      REFNODE_TIMEOUT
`

// run is refnode's main, with its environment injected for tests. It
// returns the exit code: 0 on success, 1 if the command failed, 2 for a
// usage error or a command not in this build.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cmd := "demo"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "demo":
		return demoCmd(ctx, args, stdout, stderr, getenv)
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "serve":
		return serveCmd(ctx, args, stdout, stderr, getenv)
	case "ctl":
		return ctlCmd(ctx, args, stdout, stderr, getenv)
	case "bench":
		return benchCmd(ctx, args, stdout, stderr, getenv)
	case "scale":
		return scaleCmd(ctx, args, stdout, stderr, getenv)
	default:
		fmt.Fprintf(stderr, "refnode: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("refnode demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	verbose := fs.Bool("v", false, "")
	latency := fs.Duration("latency", 20*time.Millisecond, "")
	timeout := fs.Duration("timeout", 25*time.Second, "")
	err := parseFlags(fs, args, getenv, map[string]string{"v": "REFNODE_VERBOSE", "latency": "REFNODE_LATENCY", "timeout": "REFNODE_TIMEOUT"})
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "refnode demo: %v\n\n%s", err, usage)
		return 2
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "refnode demo: unexpected argument %q\n\n%s", fs.Arg(0), usage)
		return 2
	case *latency < 0 || *timeout <= 0:
		fmt.Fprintf(stderr, "refnode demo: -latency must not be negative and -timeout must be positive\n")
		return 2
	}
	opts := demoOptions{verbose: *verbose, latency: *latency}
	if *verbose {
		opts.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if _, err := runDemo(ctx, stdout, opts); err != nil {
		fmt.Fprintf(stderr, "refnode demo: %v\n", err)
		return 1
	}
	return 0
}

// parseFlags parses args into fs, then sets each flag not given on the
// command line from its environment variable in env, if that is set.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string, env map[string]string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, variable := range env {
		if v := getenv(variable); v != "" && !given[name] {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("%s=%q: %w", variable, v, err)
			}
		}
	}
	return nil
}
