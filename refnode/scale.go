package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

const scaleUsage = `Usage: refnode scale [-nodes n] [-db url] [-heartbeat d] [-evict-after d] [-o table|json]
       refnode scale -processes n -bus url -db url [-heartbeat d] [-evict-after d] [-o table|json]

Runs -nodes management nodes in this process, on the in-memory bus,
heartbeat store and record store, and measures how the cluster follows
a join, an orderly leave and a kill: when the heartbeat store knew of
each event (the joiner's registration, the leaver's deregistration, the
dead node's eviction) and when every live node's ring agreed on the new
member set, each a millisecond poll. It also prints the start-up time,
the heap per node and the heartbeat store's calls per second.

  -nodes n         nodes to run (30)
  -heartbeat d     heartbeat interval (500ms)
  -evict-after d   eviction threshold (3s)
  -db url          the nodes' heartbeat store on this database (a
                   postgres:// or MySQL URL; tables of its own, dropped at
                   the end), the bus and the records still in memory
  -processes n     run n refnode serve processes instead, on -bus and -db,
                   under a queue and table prefix of their own (deleted at
                   the end), and read their rings from their admin
                   listeners; memory is each process's resident set
  -bus url         the RabbitMQ broker of -processes
  -o format        table or json (table)
`

// scaleEvent is the timing of one membership change.
type scaleEvent struct {
	Event string `json:"event"`
	// StoreMS is when the heartbeat store knew of it, after the action
	// (add, Close, kill) began.
	StoreMS float64 `json:"store_knew_ms"`
	// AgreedMS is when every live node's ring agreed, after the action
	// began; AfterStoreMS the same after the store knew.
	AgreedMS     float64 `json:"every_ring_agreed_ms"`
	AfterStoreMS float64 `json:"agreed_after_store_ms"`
}

// scaleReport is what refnode scale prints.
type scaleReport struct {
	Nodes int `json:"nodes"`
	// Where is where the nodes ran: "one process" or "processes".
	Where string `json:"where"`
	// Store is the heartbeat store: "memory", or the database's masked URL.
	Store        string  `json:"heartbeat_store"`
	HeartbeatMS  int64   `json:"heartbeat_interval_ms"`
	EvictAfterMS int64   `json:"evict_after_ms"`
	StartSeconds float64 `json:"start_seconds"`
	// HeapPerNodeKB is the heap per node in one process; 0 for processes.
	HeapPerNodeKB float64 `json:"heap_per_node_kib"`
	// RSSPerNodeKB is the resident set per process; 0 in one process.
	RSSPerNodeKB float64 `json:"rss_per_process_kib"`
	// StoreCallsPerS counts the heartbeat store's calls per second in one
	// process; 0 for processes.
	StoreCallsPerS float64      `json:"heartbeat_store_calls_per_second"`
	Events         []scaleEvent `json:"events"`
}

func scaleCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("refnode scale", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	nodes := fs.Int("nodes", 30, "")
	hbInterval := fs.Duration("heartbeat", 500*time.Millisecond, "")
	evict := fs.Duration("evict-after", 3*time.Second, "")
	output := fs.String("o", "table", "")
	db := fs.String("db", "", "")
	busURL := fs.String("bus", "", "")
	procs := fs.Int("processes", 0, "")
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "refnode scale: %v\nRun \"refnode scale -h\" for the flags.\n", err)
		return exitUsage
	}
	err := parseFlags(fs, args, getenv, map[string]string{"o": "REFNODE_OUTPUT", "db": "REFNODE_DB", "bus": "REFNODE_BUS"})
	hb := heartbeat.Config{Interval: *hbInterval, EvictAfter: *evict, OpTimeout: *hbInterval}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, scaleUsage)
		return 0
	case err != nil:
		return usageErr(err)
	case fs.NArg() > 0:
		return usageErr(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	case *procs != 0 && (*procs < 3 || *procs > 50):
		return usageErr(errors.New("-processes must be from 3 to 50: one joins, one leaves and one dies"))
	case *procs != 0 && (*busURL == "" || *db == ""):
		return usageErr(errors.New("-processes needs -bus (a RabbitMQ URL) and -db (a PostgreSQL or MySQL URL): the processes share them"))
	case *procs == 0 && *busURL != "":
		return usageErr(errors.New("-bus is for -processes: nodes in one process share an in-memory bus"))
	case *nodes < 3 || *nodes > 1000:
		return usageErr(errors.New("-nodes must be from 3 to 1000: one joins, one leaves and one dies"))
	case *output != "table" && *output != "json":
		return usageErr(fmt.Errorf("-o %q: use table or json", *output))
	}
	if err := hb.Validate(); err != nil {
		return usageErr(fmt.Errorf("-heartbeat %s, -evict-after %s: %w", hb.Interval, hb.EvictAfter, err))
	}
	var r *scaleReport
	if *procs != 0 {
		r, err = runScaleProcesses(ctx, *procs, *busURL, *db, hb, stderr)
	} else {
		r, err = runScale(ctx, *nodes, *db, hb, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "refnode scale: %v\n", err)
		return 1
	}
	if *output == "json" {
		data, _ := json.MarshalIndent(r, "", "  ")
		fmt.Fprintf(stdout, "%s\n", data)
		return 0
	}
	where := "in one process"
	if r.Where == "processes" {
		where = "each a refnode serve process"
	}
	fmt.Fprintf(stdout, "refnode scale: %d nodes %s, heartbeat store %s, heartbeat every %dms, evicted after %dms\n\n",
		r.Nodes, where, r.Store, r.HeartbeatMS, r.EvictAfterMS)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tSTORE_KNEW\tEVERY_RING_AGREED\tAFTER_THE_STORE")
	for _, e := range r.Events {
		fmt.Fprintf(tw, "%s\t%.0fms\t%.0fms\t%.0fms\n", e.Event, e.StoreMS, e.AgreedMS, e.AfterStoreMS)
	}
	_ = tw.Flush()
	if r.Where == "processes" {
		fmt.Fprintf(stdout, "\nstarted in %.1fs; resident set %.0f KiB per process\n", r.StartSeconds, r.RSSPerNodeKB)
		return 0
	}
	fmt.Fprintf(stdout, "\nstarted in %.1fs; heap %.0f KiB per node; heartbeat store calls %.0f/s (%.1f per node per second)\n",
		r.StartSeconds, r.HeapPerNodeKB, r.StoreCallsPerS, r.StoreCallsPerS/float64(r.Nodes))
	return 0
}

// countingStore counts the calls to a heartbeat store.
type countingStore struct {
	heartbeat.Store
	n *atomic.Int64
}

func (s countingStore) Register(ctx context.Context, node string) (int64, error) {
	s.n.Add(1)
	return s.Store.Register(ctx, node)
}

func (s countingStore) Beat(ctx context.Context, node string, epoch int64) error {
	s.n.Add(1)
	return s.Store.Beat(ctx, node, epoch)
}

func (s countingStore) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	s.n.Add(1)
	return s.Store.BeatBus(ctx, node, epoch, busUp)
}

func (s countingStore) List(ctx context.Context) ([]heartbeat.Record, error) {
	s.n.Add(1)
	return s.Store.List(ctx)
}

func (s countingStore) Evict(ctx context.Context, node string, epoch, seq int64) (bool, error) {
	s.n.Add(1)
	return s.Store.Evict(ctx, node, epoch, seq)
}

func (s countingStore) Deregister(ctx context.Context, node string, epoch int64) error {
	s.n.Add(1)
	return s.Store.Deregister(ctx, node, epoch)
}

func (s countingStore) StoreTime(ctx context.Context) (time.Time, time.Duration, error) {
	s.n.Add(1)
	return s.Store.StoreTime(ctx)
}

func (s countingStore) AddQueues(ctx context.Context, node string, queues []string) error {
	s.n.Add(1)
	return s.Store.AddQueues(ctx, node, queues)
}

func (s countingStore) Queues(ctx context.Context) (map[string][]string, error) {
	s.n.Add(1)
	return s.Store.Queues(ctx)
}

func (s countingStore) RemoveQueues(ctx context.Context, node string, queues []string) error {
	s.n.Add(1)
	return s.Store.RemoveQueues(ctx, node, queues)
}

// runScale starts n nodes, measures the heap and the store's calls in a
// steady state, then times a join, a leave and a kill.
func runScale(ctx context.Context, n int, dbURL string, hb heartbeat.Config, progress io.Writer) (r *scaleReport, err error) {
	var calls atomic.Int64
	cfg := clusterConfig{heartbeat: hb, hypervisor: simhv.Config{}, pingInterval: time.Hour, logger: slog.New(slog.DiscardHandler),
		wrapStore: func(s heartbeat.Store) heartbeat.Store { return countingStore{Store: s, n: &calls} }}
	storeName := "memory"
	var (
		shared heartbeat.Store // the database's, if any
		gates  sync.Map        // node -> *atomic.Bool: killed
	)
	if dbURL != "" {
		var salt [4]byte
		_, _ = rand.Read(salt[:])
		d, err := nodekit.OpenDatabase(ctx, nodekit.DatabaseConfig{URL: dbURL, HeartbeatTable: "scale" + hex.EncodeToString(salt[:]) + "_heartbeat",
			EvictAfter: hb.EvictAfter, AllowNoIdleTimeout: true})
		if err != nil {
			return nil, fmt.Errorf("open the database: %w; check -db", err)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if derr := d.Heartbeat.Drop(dctx); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop the heartbeat tables: %w", derr))
			}
			_ = d.Close()
		}()
		shared, storeName = d.Heartbeat, sqlconn.MaskURL(dbURL)
		cfg.heartbeatStore = func(node string) heartbeat.Store {
			dead := new(atomic.Bool)
			gates.Store(node, dead)
			return gatedStore{Store: d.Heartbeat, dead: dead}
		}
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	first := cfg
	first.nodes = 1
	c, err := startCluster(ctx, first)
	if err != nil {
		return nil, err
	}
	defer c.close()
	// The others join one at a time, each once every ring holds the
	// last: nodes that see the same sequence of member sets share each
	// set's computation (package ring's shared snapshots). Joins that
	// overlap give each node its own sequence, and at 100 nodes in one
	// process on 2 CPUs their rings' computations (about 7 ms of CPU per
	// change per node) starved the heartbeats into evictions.
	for i := 1; i < n; i++ {
		if err := c.add(ctx, cfg, fmt.Sprintf("N%d", i)); err != nil {
			return nil, err
		}
		if err := c.await(ctx, fmt.Sprintf("every ring holds node %d", i+1), c.converged); err != nil {
			return nil, err
		}
	}
	if err := c.await(ctx, "every ring holds every node", c.converged); err != nil {
		return nil, err
	}
	r = &scaleReport{Nodes: n, Where: "one process", Store: storeName, HeartbeatMS: hb.Interval.Milliseconds(), EvictAfterMS: hb.EvictAfter.Milliseconds(), StartSeconds: time.Since(start).Seconds()}
	fmt.Fprintf(progress, "scale: %d nodes agree after %.1fs; measuring the steady state for %s\n", n, r.StartSeconds, 4*hb.Interval)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	r.HeapPerNodeKB = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n) / 1024
	c0, t0 := calls.Load(), time.Now()
	select {
	case <-time.After(4 * hb.Interval):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r.StoreCallsPerS = float64(calls.Load()-c0) / time.Since(t0).Seconds()

	// storeKnows polls the store every millisecond until cond holds of
	// node's record (present or not), and returns when it first did.
	storeKnows := func(node string, present bool) (time.Time, error) {
		for {
			var recs []heartbeat.Record
			var err error
			if shared != nil {
				recs, err = shared.List(ctx)
			} else {
				recs, err = c.hb.List(ctx)
			}
			if err != nil {
				return time.Time{}, err
			}
			if slices.ContainsFunc(recs, func(r heartbeat.Record) bool { return r.Node == node }) == present {
				return time.Now(), nil
			}
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
	}
	event := func(name string, began, knew time.Time) error {
		if err := c.await(ctx, "every ring agrees after the "+name, c.converged); err != nil {
			return err
		}
		agreed := time.Now()
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		r.Events = append(r.Events, scaleEvent{Event: name, StoreMS: ms(knew.Sub(began)), AgreedMS: ms(agreed.Sub(began)), AfterStoreMS: ms(agreed.Sub(knew))})
		fmt.Fprintf(progress, "scale: %s: the store knew after %s, every ring agreed after %s\n", name, knew.Sub(began).Round(time.Millisecond), agreed.Sub(began).Round(time.Millisecond))
		return nil
	}

	// A join: the store knows at the registration (the epoch is its time).
	began := time.Now()
	if err := c.add(ctx, cfg, "joiner"); err != nil {
		return nil, err
	}
	joiner := c.all()[len(c.all())-1]
	if err := event("join", began, heartbeat.Record{Epoch: joiner.node.Epoch()}.RegisteredAt()); err != nil {
		return nil, err
	}

	// An orderly leave, then a kill, of nodes other than the first.
	for _, name := range []string{"leave", "kill"} {
		live := c.live()
		m := live[len(live)/2]
		id := m.node.UUID()
		gone := make(chan time.Time, 1)
		errc := make(chan error, 1)
		began := time.Now()
		go func() {
			at, err := storeKnows(id, false)
			if err != nil {
				errc <- err
				return
			}
			gone <- at
		}()
		if name == "leave" {
			if err := m.node.Close(); err != nil {
				return nil, fmt.Errorf("leave: %w", err)
			}
		} else {
			if g, ok := gates.Load(id); ok {
				g.(*atomic.Bool).Store(true) // its database calls fail from now on
			}
			c.kill(m)
		}
		var knew time.Time
		select {
		case knew = <-gone:
		case err := <-errc:
			return nil, err
		}
		if err := event(name, began, knew); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// errKilled is what a killed node's heartbeat store answers.
var errKilled = errors.New("refnode scale: this node was killed")

// gatedStore fails every call once dead is set: a killed node's calls on
// a shared database.
type gatedStore struct {
	heartbeat.Store
	dead *atomic.Bool
}

func (s gatedStore) Register(ctx context.Context, node string) (int64, error) {
	if s.dead.Load() {
		return 0, errKilled
	}
	return s.Store.Register(ctx, node)
}

func (s gatedStore) Beat(ctx context.Context, node string, epoch int64) error {
	if s.dead.Load() {
		return errKilled
	}
	return s.Store.Beat(ctx, node, epoch)
}

func (s gatedStore) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	if s.dead.Load() {
		return errKilled
	}
	return s.Store.BeatBus(ctx, node, epoch, busUp)
}

func (s gatedStore) List(ctx context.Context) ([]heartbeat.Record, error) {
	if s.dead.Load() {
		return nil, errKilled
	}
	return s.Store.List(ctx)
}

func (s gatedStore) Evict(ctx context.Context, node string, epoch, seq int64) (bool, error) {
	if s.dead.Load() {
		return false, errKilled
	}
	return s.Store.Evict(ctx, node, epoch, seq)
}

func (s gatedStore) Deregister(ctx context.Context, node string, epoch int64) error {
	if s.dead.Load() {
		return errKilled
	}
	return s.Store.Deregister(ctx, node, epoch)
}

func (s gatedStore) StoreTime(ctx context.Context) (time.Time, time.Duration, error) {
	if s.dead.Load() {
		return time.Time{}, 0, errKilled
	}
	return s.Store.StoreTime(ctx)
}

func (s gatedStore) AddQueues(ctx context.Context, node string, queues []string) error {
	if s.dead.Load() {
		return errKilled
	}
	return s.Store.AddQueues(ctx, node, queues)
}

func (s gatedStore) Queues(ctx context.Context) (map[string][]string, error) {
	if s.dead.Load() {
		return nil, errKilled
	}
	return s.Store.Queues(ctx)
}

func (s gatedStore) RemoveQueues(ctx context.Context, node string, queues []string) error {
	if s.dead.Load() {
		return errKilled
	}
	return s.Store.RemoveQueues(ctx, node, queues)
}
