package servicetest_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// sqlHB is the timing of every cluster on SQL in these tests: the default.
var sqlHB = servicetest.SQLHeartbeat()

// databases are the SQL databases every SQL test runs on: SQLite always,
// PostgreSQL and MySQL when their variables are set (see
// internal/testenv: they skip naming the variable, or fail under CI=true).
var databases = []struct {
	name string
	url  func(testing.TB) string
}{
	{"sqlite", func(testing.TB) string { return "sqlite" }},
	{"postgres", testenv.PostgresDSN},
	{"mysql", testenv.MySQLDSN},
}

// onEachDatabase runs test as a subtest per database, given its
// Options.Database.
func onEachDatabase(t *testing.T, test func(t *testing.T, db string)) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) { test(t, d.url(t)) })
	}
}

// holdHeader marks the Add that a holder stalls.
const holdHeader = "servicetest-hold"

// holder stalls the first Add that carries holdHeader, on whichever node
// takes it, until released: a handler that outlives its node's claim,
// as a stalled one does. It then writes, and reports the write's error.
type holder struct {
	taken   atomic.Bool
	arrived chan string   // the node that holds the Add
	release chan struct{} // closed by releaseAll
	once    sync.Once
	result  chan error // the held write's error
}

func newHolder() *holder {
	return &holder{arrived: make(chan string, 1), release: make(chan struct{}), result: make(chan error, 1)}
}

// releaseAll lets the held Add write; idempotent.
func (h *holder) releaseAll() { h.once.Do(func() { close(h.release) }) }

// service is counterService(env), whose first Add with holdHeader waits
// for releaseAll and writes then, whatever became of its message.
func (h *holder) service(env nodekit.Env) service.Service {
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, _ Add) (Added, error) {
		if r.Header(holdHeader) == "" || !h.taken.CompareAndSwap(false, true) {
			return add(ctx, env, r)
		}
		h.arrived <- env.Node
		<-h.release
		// The write outlives the message: its sender may have given up,
		// its node may be dead.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		got, err := add(ctx, env, r)
		h.result <- err
		return got, err
	})
	return service.API("counter", mux)
}

// startCounters starts a cluster of n nodes of the counter service on
// db, its first held Add stalled by h if not nil.
func startCounters(t *testing.T, db string, n int, h *holder) *servicetest.Cluster {
	t.Helper()
	c := servicetest.Start(t, servicetest.Options{
		Nodes: n, Database: db, Schema: &counterSchema, Registry: counterRegistry(),
		Services: func(_ int, env nodekit.Env) []service.Service {
			if h != nil {
				return []service.Service{h.service(env)}
			}
			return []service.Service{counterService(env)}
		},
	})
	if h != nil {
		t.Cleanup(h.releaseAll) // before the cluster closes: its nodes wait for their handlers
	}
	return c
}

// counter reads res's counter from the database, 0 if it has no row.
func counter(t *testing.T, c *servicetest.Cluster, res string) int64 {
	t.Helper()
	var n int64
	q := bind(c.Database().Dialect, "SELECT n FROM "+c.Database().Tables+"_counters WHERE resource = ?")
	err := c.DB().QueryRowContext(t.Context(), q, res).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return n
}

// TestSQLKillOwner: calls about one resource, some in flight while its
// owner is killed, each with bus.WithRetry, all succeed, the ones after
// the kill on the new owner; every call is applied once: the replies
// count 1, 2, 3, ... with no gap or repeat, and the row holds the number
// of calls.
func TestSQLKillOwner(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, db string) {
		c := startCounters(t, db, 3, nil)
		cl := c.Client(t)
		res := message.NewUUID()
		owner := c.Owner(res)
		// Each call has a deadline of its own: a killed node's handlers
		// run on, and one that forwarded a call before the kill waits
		// for the reply until the call's deadline; Close waits for it.
		call := func(ctx context.Context) (Added, error) {
			ctx, cancel := context.WithTimeout(ctx, 3*sqlHB.EvictAfter)
			defer cancel()
			return service.Call[Added](ctx, cl, Add{Resource: res}, bus.WithRetry(5))
		}
		var counts []int64
		for range 3 {
			got, err := call(t.Context())
			require.NoError(t, err)
			assert.Equal(t, owner, got.Node, "the owner counts")
			counts = append(counts, got.N)
		}

		// Each caller calls until it made `calls` calls started after the
		// kill, so that some are in flight when it happens.
		const callers, calls = 4, 3
		var (
			mu     sync.Mutex
			errs   []error
			after  []string // the nodes that counted the calls started after the kill
			killed atomic.Bool
			wg     sync.WaitGroup
		)
		for range callers {
			wg.Go(func() {
				for n := 0; n < calls; {
					late := killed.Load()
					got, err := call(t.Context())
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else {
						counts = append(counts, got.N)
						if late {
							after = append(after, got.Node)
						}
					}
					mu.Unlock()
					if late {
						n++
					}
				}
			})
		}
		c.WaitFor(t, 5*time.Second, "some calls were counted", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(counts) > 4
		})
		start := time.Now()
		killed.Store(true)
		c.Kill(owner)
		wg.Wait()
		t.Logf("%d calls; those in flight and after the kill were all answered %v after it (evict after %v)",
			len(counts), time.Since(start).Round(time.Millisecond), sqlHB.EvictAfter)
		require.Empty(t, errs, "every call with bus.WithRetry succeeds")
		total := len(counts)
		slices.Sort(counts)
		want := make([]int64, total)
		for i := range want {
			want[i] = int64(i + 1)
		}
		assert.Equal(t, want, counts, "each call was counted once")
		assert.Equal(t, int64(total), counter(t, c, res), "the row holds one count per call")
		assert.Len(t, after, callers*calls)
		for _, n := range after {
			assert.NotEqual(t, owner, n, "the dead owner counts no more")
		}

		c.WaitConverged(t, 2*sqlHB.EvictAfter)
		got, err := call(t.Context())
		require.NoError(t, err)
		assert.Equal(t, c.Owner(res), got.Node, "the new owner counts")
		assert.Equal(t, int64(total+1), got.N)
	})
}

// TestSQLDuplicateRunsOnce: a message sent again with its id
// (bus.WithID), one after the other or at once, is counted once, and
// every copy gets the first reply.
func TestSQLDuplicateRunsOnce(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, db string) {
		c := startCounters(t, db, 3, nil)
		cl := c.Client(t)
		res := message.NewUUID()
		call := func(opts ...bus.Option) Added {
			t.Helper()
			got, err := service.Call[Added](t.Context(), cl, Add{Resource: res}, opts...)
			require.NoError(t, err)
			return got
		}
		id := message.NewUUID()
		first := call(bus.WithID(id))
		assert.Equal(t, Added{N: 1, Node: c.Owner(res)}, first)
		assert.Equal(t, first, call(bus.WithID(id)), "the second copy gets the first reply")
		assert.Equal(t, int64(1), counter(t, c, res), "and is not counted")

		id = message.NewUUID()
		replies := make([]Added, 8)
		var wg sync.WaitGroup
		for i := range replies {
			wg.Go(func() { replies[i] = call(bus.WithID(id)) })
		}
		wg.Wait()
		for _, got := range replies {
			assert.Equal(t, Added{N: 2, Node: c.Owner(res)}, got, "copies sent at once: counted once, one reply")
		}
		assert.Equal(t, int64(3), call().N, "a new message is counted")
		assert.Equal(t, int64(3), counter(t, c, res))
	})
}

// TestSQLStaleOwnerCannotCommit: a handler of the owner, stalled while
// its node is cut off from the heartbeat store or killed, writes once
// peers evicted its node and a new owner wrote: the fence refuses its
// write (fence.ErrStale, message.ErrNotOwner) and the row keeps the new
// owner's count. A killed node's pool stays open: its write reaches the
// database and is refused there.
func TestSQLStaleOwnerCannotCommit(t *testing.T) {
	for _, fault := range []struct {
		name   string
		cut    func(c *servicetest.Cluster, id string)
		killed bool
	}{
		{"heartbeat stopped", (*servicetest.Cluster).StopHeartbeat, false},
		{"killed", (*servicetest.Cluster).Kill, true},
	} {
		t.Run(fault.name, func(t *testing.T) {
			onEachDatabase(t, func(t *testing.T, db string) {
				h := newHolder()
				c := startCounters(t, db, 3, h)
				cl := c.Client(t)
				res := message.NewUUID()
				owner := c.Owner(res)
				got, err := service.Call[Added](t.Context(), cl, Add{Resource: res})
				require.NoError(t, err)
				require.Equal(t, Added{N: 1, Node: owner}, got)

				// The held call, retried after a kill, whose message the
				// survivors move to the new owner. Its deadline bounds the
				// wait of a killed node's handler for a reply that never
				// comes, and so Close.
				ctx, cancel := context.WithTimeout(t.Context(), 4*sqlHB.EvictAfter)
				defer cancel()
				heldCall := make(chan error, 1)
				go func() {
					opts := []bus.Option{bus.WithHeader(holdHeader, "1")}
					if fault.killed {
						opts = append(opts, bus.WithRetry(5))
					}
					_, err := service.Call[Added](ctx, cl, Add{Resource: res}, opts...)
					heldCall <- err
				}()
				select {
				case n := <-h.arrived:
					require.Equal(t, owner, n, "the owner holds the call")
				case <-time.After(5 * time.Second):
					t.Fatal("the held call did not reach the owner's handler")
				}

				fault.cut(c, owner)
				c.WaitGone(t, owner, 3*sqlHB.EvictAfter)
				hbQuery := bind(c.Database().Dialect, "SELECT COUNT(*) FROM "+c.Database().HeartbeatTable+" WHERE node = ?")
				c.WaitFor(t, sqlHB.EvictAfter, "the owner's heartbeat record is gone", func() bool {
					var n int
					return c.DB().QueryRowContext(t.Context(), hbQuery, owner).Scan(&n) == nil && n == 0
				})
				got, err = service.Call[Added](t.Context(), cl, Add{Resource: res}, bus.WithRetry(5))
				require.NoError(t, err)
				assert.NotEqual(t, owner, got.Node, "a survivor counts")

				h.releaseAll()
				select {
				case err = <-h.result:
				case <-time.After(10 * time.Second):
					t.Fatal("the held write did not end")
				}
				require.ErrorIs(t, err, fence.ErrStale, "the stale owner's write is refused")
				assert.ErrorIs(t, err, message.ErrNotOwner)
				var stale *fence.StaleError
				require.ErrorAs(t, err, &stale)
				assert.Equal(t, owner, stale.Claim.Node)
				t.Logf("the stale owner's write: %v", err)

				// The held call: after a kill its message went back to the
				// dead node's queue and the survivors moved it to the new
				// owner, and the call was retried there. After a cut, the
				// refusal (not_owner: nothing ran) may be routed again, or
				// api.portal's message given back by the cut-off node's
				// portal, to the new owner; else the call fails. Either
				// way it counted once or not at all, the stale write never.
				err = <-heldCall
				t.Logf("the held call: %v", err)
				if fault.killed {
					require.NoError(t, err, "the held call, retried, succeeds on a survivor")
				}
				if err != nil {
					assert.True(t, errors.Is(err, message.ErrNotOwner) || errors.Is(err, message.ErrNodeLeft), "refused, or its node left: %v", err)
					assert.Equal(t, int64(2), counter(t, c, res), "the stale write left no trace")
				} else {
					assert.Equal(t, int64(3), counter(t, c, res), "the held call counted once, by a survivor")
				}
			})
		})
	}
}

// twoTables is a Schema of two tables joined by a foreign key, which
// Close must drop whatever their order.
var twoTables = nodekit.Schema{Migrations: func(d sqlstore.Dialect, tables string) [][]string {
	return [][]string{{
		"CREATE TABLE " + tables + "_parent (id VARCHAR(36) PRIMARY KEY)",
		"CREATE TABLE " + tables + "_child (id VARCHAR(36) PRIMARY KEY, parent VARCHAR(36) NOT NULL, FOREIGN KEY (parent) REFERENCES " + tables + "_parent (id))",
	}}
}}

// TestSQLCloseDropsEverything: Close drops every table the cluster made
// (the heartbeat store's, the fence's, the Schema's and one a service
// made on its own), or removes the SQLite file's directory; a second
// Close does nothing.
func TestSQLCloseDropsEverything(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, db string) {
		c, err := servicetest.New(t.Context(), servicetest.Options{Nodes: 2, Database: db, Schema: &twoTables})
		require.NoError(t, err)
		info := c.Database()
		closed := false
		t.Cleanup(func() {
			if !closed {
				c.Close()
			}
		})
		assert.Regexp(t, `^st[0-9a-f]{8}$`, info.Prefix)
		assert.Equal(t, info.Prefix+"_heartbeat", info.HeartbeatTable)
		assert.Equal(t, info.Prefix+"_app", info.Tables)
		assert.NotEmpty(t, info.URL)
		_, err = c.DB().ExecContext(t.Context(), "CREATE TABLE "+info.Tables+"_extra (id INT)") // not in the Schema
		require.NoError(t, err)
		ins := bind(info.Dialect, "INSERT INTO "+info.Tables+"_parent (id) VALUES (?)")
		_, err = c.DB().ExecContext(t.Context(), ins, "p")
		require.NoError(t, err)
		ins = bind(info.Dialect, "INSERT INTO "+info.Tables+"_child (id, parent) VALUES (?, ?)")
		_, err = c.DB().ExecContext(t.Context(), ins, "c", "p")
		require.NoError(t, err)

		want := []string{info.Tables + "_child", info.Tables + "_extra", info.Tables + "_fence_meta", info.Tables + "_fence_once",
			info.Tables + "_fence_tokens", info.Tables + "_meta", info.Tables + "_parent",
			info.HeartbeatTable, info.HeartbeatTable + "_meta", info.HeartbeatTable + "_queues"}
		assert.Equal(t, want, tablesOf(t, c.DB(), info), "the cluster's tables")

		c.Close()
		closed = true
		c.Close() // idempotent
		assert.Equal(t, info, c.Database(), "Database still describes it")
		if info.Dialect == sqlstore.SQLite {
			assert.NotEmpty(t, info.Dir)
			assert.NoDirExists(t, info.Dir, "Close removes the SQLite file's directory")
			return
		}
		p, err := sqlconn.Open(sqlconn.Config{URL: db, MaxOpenConns: 1})
		require.NoError(t, err)
		defer p.Close()
		assert.Empty(t, tablesOf(t, p.DB, info), "Close dropped every table of the cluster")
	})
}

// tablesOf lists, from db's catalog, the tables whose names start with
// info.Prefix, sorted.
func tablesOf(t *testing.T, db *sql.DB, info servicetest.Database) []string {
	t.Helper()
	q := `SELECT name FROM sqlite_master WHERE type = 'table'`
	switch info.Dialect {
	case sqlstore.Postgres:
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`
	case sqlstore.MySQL:
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`
	}
	rows, err := db.QueryContext(t.Context(), q)
	require.NoError(t, err)
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		if strings.HasPrefix(n, info.Prefix) {
			names = append(names, n)
		}
	}
	require.NoError(t, rows.Err())
	slices.Sort(names)
	return names
}
