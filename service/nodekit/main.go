package nodekit

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
)

// Main is a node program's main function: it reads the [Settings] from
// the command line and the environment (variables named after
// cfg.Name upper-cased: VOLUME_BUS for "volume"), runs the node until
// SIGTERM or SIGINT, leaves the cluster in order, and exits: 0 after an
// orderly leave, 1 if the node failed or was evicted (the reason on
// stderr), 2 for a usage error. A second signal quits at once.
//
//	func main() {
//		nodekit.Main(nodekit.Config{Name: "volume", Registry: reg, Schema: &volume.Schema, Services: services})
//	}
func Main(cfg Config) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // after the first signal, the second has its default effect
	code := MainArgs(ctx, cfg, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// MainArgs is [Main] with its environment injected, for tests and for
// programs with subcommands: it parses args (flags as
// [Settings.Register] defines them, variables as [Parse] reads them),
// runs the node until ctx ends, and returns the exit code.
//
// With "purge" first in args, it runs [Purge] instead, with the same
// flags: it deletes what the stopped cluster of -prefix left on the
// broker and in the database.
func MainArgs(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	envPrefix := strings.ToUpper(cfg.Name)
	purge := len(args) > 0 && args[0] == "purge"
	if purge {
		args = args[1:]
	}
	fs := flag.NewFlagSet(cfg.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var s Settings
	s.Register(fs, cfg.Name)
	usage := fmt.Sprintf("Usage: %[1]s [purge] -bus amqp://user:password@host:5672/ [flags]\n\nRuns one management node; SIGTERM or Ctrl-C leaves the cluster in order.\n"+
		"\"%[1]s purge\" deletes what a stopped cluster of -prefix left on the broker and in the database.\n\n", cfg.Name) +
		"Flags (each may also be set by the variable shown; a flag wins):\n" + fmt.Sprintf(FlagsHelp, envPrefix, cfg.Name) +
		"\nAdmin HTTP: GET /healthz (200 while serving), GET /status (JSON), GET /metrics (Prometheus).\n"
	err := Parse(fs, args, envPrefix, getenv)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\nRun \"%s -h\" for the flags.\n", cfg.Name, err, cfg.Name)
		return 2
	}
	if err := s.Validate(envPrefix); err != nil {
		fmt.Fprintf(stderr, "%s: %v\nRun \"%s -h\" for the flags.\n", cfg.Name, err, cfg.Name)
		return 2
	}
	if purge {
		p, err := Purge(ctx, s, cfg.Name)
		if err != nil {
			fmt.Fprintf(stderr, "%s purge: %v\n", cfg.Name, err)
			return 1
		}
		fmt.Fprintf(stdout, "deleted %d queues: %s\ndropped tables: %s\n", len(p.Queues), strings.Join(p.Queues, " "), strings.Join(p.Tables, " "))
		return 0
	}
	if cfg.Stdout == nil {
		cfg.Stdout = stdout
	}
	if cfg.Logger == nil {
		level, _ := s.Level()
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	}
	if err := Run(ctx, cfg, s); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cfg.Name, err)
		return 1
	}
	return 0
}

// Run opens a node ([Open]), runs it until ctx ends ([Node.Run]) and
// closes it. It returns nil after an orderly leave, or why the node
// stopped.
func Run(ctx context.Context, cfg Config, s Settings) error {
	n, err := Open(ctx, cfg, s)
	if err != nil {
		return err
	}
	runErr := n.Run(ctx)
	if err := n.Close(); err != nil {
		n.log.Warn("close the node", "err", err)
	}
	return runErr
}
