package nodekit

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service/tracing"
)

// Settings are what an operator sets for one node: flags and their
// environment variables (see [Settings.Register] and [Parse]).
type Settings struct {
	// Bus is the RabbitMQ broker, amqp:// or amqps://; for a RabbitMQ
	// cluster, one URL per broker node, comma-separated (see
	// amqpbus.Config.URL). Required.
	Bus string
	// QueueType is the type of the durable queues: "classic" (the
	// default) or "quorum", replicated over a RabbitMQ cluster (see
	// amqpbus.Config.QueueType). Every node of a cluster must use the
	// same.
	QueueType string
	// DB is the database of heartbeats and records: sqlite:PATH,
	// postgres://… or mysql://…. Default sqlite:<program>.db.
	DB string
	// Listen is the admin HTTP address. Default 127.0.0.1:0 (a free port).
	Listen string
	// Prefix is the queue prefix, and the start of table names (see
	// [TableBase]). Default bus.DefaultPrefix.
	Prefix string
	// LogLevel is the level of the node's logs on stderr: debug, info,
	// warn or error. Default info.
	LogLevel string
	// Heartbeat is the heartbeat timing: Interval (-heartbeat, 500 ms),
	// EvictAfter (-evict-after, 3 s) and SessionLocks (-session-locks,
	// on) from the flags; a program may set the rest (Now, say) before
	// [Open].
	Heartbeat heartbeat.Config
	// Ring is the ring kind: "table", a partition table (the default),
	// or "consistent", buraksezer/consistent. Every node of a cluster
	// must use the same.
	Ring string
	// Trace is where the node's spans go: "none" (the default: the W3C
	// trace context still travels in the messages), "stdout" (JSON on
	// stderr) or "otlp" (OTLP over HTTP to OTEL_EXPORTER_OTLP_ENDPOINT,
	// default http://localhost:4318). See package service/tracing.
	Trace string
	// AllowNoIdleTimeout lets the node run on MySQL, which cannot end an
	// idle transaction: see DatabaseConfig.AllowNoIdleTimeout.
	AllowNoIdleTimeout bool
	// StartWait is how long Open waits for the database and the broker
	// to answer at start (a node started alongside them, or while one
	// restarts), trying again with backoff; 0 fails at the first refusal.
	// A refusal that waiting cannot cure (a wrong password, a database
	// that does not exist, a bad URL) fails at once. The flag's default
	// is 30 s.
	StartWait time.Duration
	// Pprof serves the runtime's profiles (goroutine, heap, CPU, trace,
	// …) under /debug/pprof/ on the admin listener, as net/http/pprof
	// does. Off by default: the admin address should not be public.
	Pprof bool
}

// FlagsHelp is the usage text of the flags [Settings.Register] defines,
// for a program's -h: fmt.Sprintf(FlagsHelp, envPrefix, program).
const FlagsHelp = `  -bus url[,url…]    RabbitMQ broker, amqp:// or amqps:// (required); a   %[1]s_BUS
                     cluster's nodes, comma-separated
  -queue-type t      classic or quorum (classic): quorum queues are        %[1]s_QUEUE_TYPE
                     replicated over a RabbitMQ cluster; every node of
                     a cluster must use the same
  -db url            database of heartbeats and records                    %[1]s_DB
                     (sqlite:%[2]s.db; or postgres://…, mysql://…)
  -listen addr       admin HTTP address (127.0.0.1:0: a free port)         %[1]s_LISTEN
  -prefix p          queue prefix, and table names (cloudbus)              %[1]s_PREFIX
  -log-level l       debug, info, warn or error (info), logs on stderr     %[1]s_LOG_LEVEL
  -heartbeat d       heartbeat interval (500ms)                            %[1]s_HEARTBEAT
  -evict-after d     evict a node silent for this long (3s)                %[1]s_EVICT_AFTER
  -session-locks     hold a database session lock, and evict a peer whose  %[1]s_SESSION_LOCKS
                     lock is free once its beat is late (true): a dead
                     process is evicted in about a second, not -evict-after
  -ring kind         ring of resource owners: table, a partition table,    %[1]s_RING
                     or consistent, buraksezer/consistent (table); every
                     node of a cluster must use the same
  -db-allow-no-idle-timeout  run on MySQL, which cannot end a transaction  %[1]s_DB_ALLOW_NO_IDLE_TIMEOUT
                     left idle (false): see docs/operations.md
  -start-wait d      wait this long for the database and the broker to    %[1]s_START_WAIT
                     answer at start, trying again (30s; 0: fail at once)
  -pprof             serve the runtime's profiles on the admin listener,   %[1]s_PPROF
                     GET /debug/pprof/ (off): go tool pprof reads them
  -trace exporter    where the node's spans go: none, stdout (JSON on      %[1]s_TRACE
                     stderr) or otlp (OTEL_EXPORTER_OTLP_ENDPOINT) (none);
                     the W3C trace context travels in messages anyway
`

// Register defines the node's flags on fs, writing into s, with the
// defaults above; program names the default SQLite file.
func (s *Settings) Register(fs *flag.FlagSet, program string) {
	def := heartbeat.DefaultConfig()
	fs.StringVar(&s.Bus, "bus", "", "RabbitMQ broker, amqp:// or amqps://; a cluster's nodes comma-separated")
	fs.StringVar(&s.QueueType, "queue-type", string(amqpbus.QueueClassic), "durable queues: classic or quorum (replicated over a RabbitMQ cluster)")
	fs.StringVar(&s.DB, "db", "sqlite:"+program+".db", "database of heartbeats and records")
	fs.StringVar(&s.Listen, "listen", "127.0.0.1:0", "admin HTTP address")
	fs.StringVar(&s.Prefix, "prefix", bus.DefaultPrefix, "queue prefix, and table names")
	fs.StringVar(&s.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&s.Heartbeat.Interval, "heartbeat", def.Interval, "heartbeat interval")
	fs.DurationVar(&s.Heartbeat.EvictAfter, "evict-after", def.EvictAfter, "evict a node silent for this long")
	fs.BoolVar(&s.Heartbeat.SessionLocks, "session-locks", true, "hold a database session lock; evict a peer whose lock is free once its beat is late")
	fs.StringVar(&s.Ring, "ring", "table", "ring of resource owners: table or consistent")
	fs.StringVar(&s.Trace, "trace", "none", "where spans go: none, stdout or otlp")
	fs.BoolVar(&s.AllowNoIdleTimeout, "db-allow-no-idle-timeout", false, "run on MySQL, which cannot end a transaction left idle")
	fs.DurationVar(&s.StartWait, "start-wait", 30*time.Second, "wait this long for the database and the broker to answer at start")
	fs.BoolVar(&s.Pprof, "pprof", false, "serve the runtime's profiles under /debug/pprof/ on the admin listener")
}

// Parse parses args into fs, then sets each flag not given on the
// command line from its environment variable, if set: envPrefix, '_',
// and the flag's name upper-cased with '-' as '_' (-evict-after:
// VOLUME_EVICT_AFTER for envPrefix "VOLUME"). A flag wins over its
// variable. getenv is os.Getenv, injected for tests.
func Parse(fs *flag.FlagSet, args []string, envPrefix string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		variable := EnvName(envPrefix, f.Name)
		if v := getenv(variable); v != "" && !given[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", variable, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// EnvName returns the variable of flag name: envPrefix_NAME, upper-cased,
// '-' as '_'.
func EnvName(envPrefix, name string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// queuePrefix is a valid bus prefix (bus.Config.Prefix).
var queuePrefix = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64})*$`)

// Transport returns the broker settings of s for amqpbus.Dial, named
// name in the broker's connection list; Validate has checked them.
func (s *Settings) Transport(name string, log *slog.Logger) amqpbus.Config {
	qt, _ := amqpbus.ParseQueueType(s.QueueType)
	return amqpbus.Config{URL: s.Bus, QueueType: qt, ConnectionName: name, Logger: log}
}

// Validate reports every problem with s at once, naming the flags and
// their variables (envPrefix as in [Parse]), and fills the heartbeat's
// OpTimeout (one interval) if unset.
func (s *Settings) Validate(envPrefix string) error {
	var errs []error
	switch {
	case s.Bus == "":
		errs = append(errs, errors.New("-bus (or "+EnvName(envPrefix, "bus")+") is required: the amqp:// URL of the RabbitMQ broker the nodes share, "+
			"e.g. -bus amqp://guest:guest@127.0.0.1:5672/. An in-memory bus cannot span processes"))
	default:
		for _, u := range amqpbus.SplitURLs(s.Bus) {
			if !strings.HasPrefix(u, "amqp://") && !strings.HasPrefix(u, "amqps://") {
				errs = append(errs, fmt.Errorf("-bus %s is not an amqp:// or amqps:// URL", amqpbus.MaskURL(u)))
			}
		}
	}
	if _, err := amqpbus.ParseQueueType(s.QueueType); err != nil {
		errs = append(errs, fmt.Errorf("-queue-type: %w", err))
	}
	if _, err := s.Level(); err != nil {
		errs = append(errs, err)
	}
	if s.Heartbeat.OpTimeout == 0 {
		s.Heartbeat.OpTimeout = s.Heartbeat.Interval
	}
	if s.Heartbeat.Interval <= 0 || s.Heartbeat.EvictAfter <= 0 {
		errs = append(errs, errors.New("-heartbeat and -evict-after must be positive"))
	} else if err := s.Heartbeat.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("-heartbeat %s, -evict-after %s: %w", s.Heartbeat.Interval, s.Heartbeat.EvictAfter, err))
	}
	if _, err := sqlconn.ParseURL(s.DB, sqlconn.Auto); err != nil {
		errs = append(errs, fmt.Errorf("-db: %w", err))
	}
	if !queuePrefix.MatchString(s.Prefix) {
		errs = append(errs, fmt.Errorf("-prefix %q: use letters, digits, '_' and '-' in dot-separated segments", s.Prefix))
	}
	if _, err := NewRing(s.Ring); err != nil {
		errs = append(errs, err)
	}
	if s.StartWait < 0 {
		errs = append(errs, fmt.Errorf("-start-wait %s is negative", s.StartWait))
	}
	switch s.Trace {
	case "", tracing.ExporterNone, tracing.ExporterStdout, tracing.ExporterOTLP:
	default:
		errs = append(errs, fmt.Errorf("-trace %q: use none, stdout or otlp", s.Trace))
	}
	return errors.Join(errs...)
}

// NewRing returns an empty ring of the kind named: "table", the default
// partition table, or "consistent", buraksezer/consistent with the
// library's defaults (docs/design.md, "The ring", compares them).
func NewRing(kind string) (ring.Ring, error) {
	switch kind {
	case "table", "":
		return ring.New(ring.DefaultConfig())
	case "consistent":
		return ring.NewConsistent(ring.DefaultConsistentConfig())
	}
	return nil, fmt.Errorf("-ring %q: use table or consistent", kind)
}

// evictAfter is s's eviction threshold, or the default.
func (s *Settings) evictAfter() time.Duration {
	return s.Heartbeat.WithDefaults().EvictAfter
}

// Level returns LogLevel as a slog.Level ("" is info).
func (s *Settings) Level() (slog.Level, error) {
	var l slog.Level
	if s.LogLevel == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(s.LogLevel)); err != nil {
		return l, fmt.Errorf("-log-level %q: use debug, info, warn or error", s.LogLevel)
	}
	return l, nil
}
