package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// The preamble every process test shares: the refnode binary, built once;
// the skip rules; and a cluster of refnode serve processes on a prefix of
// its own, cleaned up after the test. A process test states what is
// particular to it:
//
//	func TestSomething(t *testing.T) {
//		ctx, broker := startProcessTest(t, processTest{Timeout: time.Minute})
//		pc := newProcCluster(t, ctx, broker, onSQLite, "something")
//		nodes, ids, r := pc.startSQLite(t, ctx, []string{"A", "B", "C"}, []string{"REFNODE_BUS=" + broker})
//		cl := newClient(t, ctx, broker, pc.prefix)
//		…
//	}
//
// The fault tests build a faultCluster (harness_test.go) on a
// procCluster: the same prefix, tables and cleanup, each node behind its
// own proxies.

// The refnode binary the process tests run, built once by TestMain when
// those tests will run (CLOUDBUS_AMQP_URL set, or CI=true: see
// testenv.WillRun).
var (
	refnodeBin string
	buildErr   error
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(buildFirst{m})
}

// buildFirst builds the refnode binary before the tests run and removes
// it after.
type buildFirst struct{ m *testing.M }

func (b buildFirst) Run() int {
	if testenv.WillRun(testenv.AMQPVar) || testenv.WillRun(testenv.AMQPClusterVar) {
		dir, err := os.MkdirTemp("", "refnode-bin-")
		if err != nil {
			buildErr = err
		} else {
			defer os.RemoveAll(dir)
			refnodeBin = filepath.Join(dir, "refnode")
			buildErr = build(refnodeBin)
		}
	}
	return b.m.Run()
}

// build runs go build -o bin . in this package's directory.
func build(bin string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("find the go command to build refnode: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build -o %s .: %w\n%s", bin, err, out)
	}
	return nil
}

// processTest is what is particular to a process test's start.
type processTest struct {
	// Runs says what the test runs, in its skip message under -short.
	// Default "starts refnode processes".
	Runs string
	// FullSpeed skips the test under -race: its timing bounds assume a
	// binary and a test at full speed. CI runs it without -race (.ci/run
	// names it).
	FullSpeed bool
	// OnCluster runs the test on the private 3-node RabbitMQ cluster of
	// .ci/rabbitmq-cluster (CLOUDBUS_AMQP_CLUSTER) instead of the shared
	// broker: the broker startProcessTest returns is the nodes' URLs,
	// comma-separated, which refnode serve -bus, newClient, newJanitor
	// and rabbitmqctl take as they are.
	OnCluster bool
	// Timeout bounds the test: the context startProcessTest returns ends
	// after it. Required.
	Timeout time.Duration
}

// startProcessTest begins a test that runs refnode processes. It skips
// the test under -short, and under -race if p.FullSpeed; without
// CLOUDBUS_AMQP_URL it skips naming the variable, or fails under CI=true;
// it fails the test if refnode did not build. It returns a context that
// ends after p.Timeout, and the broker's URL. The database, if any, is
// the cluster's: newProcCluster.
func startProcessTest(t *testing.T, p processTest) (context.Context, string) {
	t.Helper()
	if p.FullSpeed && raceEnabled {
		name, _, _ := strings.Cut(t.Name(), "/")
		t.Skipf("skipped under -race: its timing assumes full speed; CI runs it without -race: go test -count=1 -run '^%s$' ./refnode", name)
	}
	if testing.Short() {
		t.Skipf("%s; run it without -short", cmp.Or(p.Runs, "starts refnode processes"))
	}
	var broker string
	if p.OnCluster {
		broker = testenv.AMQPCluster(t)
	} else {
		broker = testenv.AMQPURL(t)
	}
	require.NoError(t, buildErr, "build refnode")
	ctx, cancel := context.WithTimeout(t.Context(), p.Timeout)
	t.Cleanup(cancel)
	return ctx, broker
}

// procDB is the database a test cluster's nodes share.
type procDB int

const (
	onPostgres procDB = iota // CLOUDBUS_POSTGRES_DSN, a postgres:// URL
	onMariaDB                // CLOUDBUS_MYSQL_DSN, passed to refnode as a mysql:// URL
	onSQLite                 // a file in the cluster's directory; no variable
)

// url returns what refnode serve -db takes for the database: for a
// server, the URL from its variable (without it the test skips, naming
// it, or fails under CI=true); for SQLite, a file in dir.
func (d procDB) url(t *testing.T, dir string) string {
	t.Helper()
	switch d {
	case onSQLite:
		return "sqlite:" + filepath.Join(dir, "cluster.db")
	case onMariaDB:
		u, err := mysqlURL(testenv.MySQLDSN(t))
		if err != nil {
			t.Fatalf("%s: %v", testenv.MySQLVar, err)
		}
		return u
	default:
		dsn := testenv.PostgresDSN(t)
		if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
			t.Fatalf("%s must be a postgres:// URL: the test passes it to refnode serve -db", testenv.PostgresVar)
		}
		return dsn
	}
}

// procCluster is one test cluster's refnode serve processes: on a broker,
// a database and a prefix of their own, refnode-test-<name>-<random>, so
// that no two tests share a queue or a table. Only the test's goroutine
// uses it.
type procCluster struct {
	dir, broker, prefix string
	db                  string    // refnode serve -db
	tables              *dbTables // the cluster's tables in the database; nil on SQLite
	all                 []*child  // every process started, oldest first
}

// newProcCluster prepares a cluster on broker and db with a new prefix,
// and registers its cleanup (cleanBroker, then the tables dropped and
// none left), which runs after each process's own (startChild: SIGKILL).
// No process runs until serve.
func newProcCluster(t *testing.T, ctx context.Context, broker string, db procDB, name string) *procCluster {
	t.Helper()
	pc := &procCluster{dir: t.TempDir(), broker: broker, prefix: "refnode-test-" + name + "-" + randomHex(4)}
	pc.db = db.url(t, pc.dir)
	if db != onSQLite {
		tables, err := openTables(ctx, pc.db, nodekit.TableBase(pc.prefix))
		require.NoError(t, err)
		pc.tables = tables
	}
	t.Cleanup(func() { pc.cleanup(t) })
	return pc
}

// serve starts `refnode serve` labelled label with args, the cluster's
// -prefix and -listen 127.0.0.1:0, and env; the caller waits for it with
// awaitHealthy.
func (pc *procCluster) serve(t *testing.T, label string, args, env []string) *child {
	t.Helper()
	c := startChild(t, pc.dir, label, append(slices.Clip(args), "-prefix", pc.prefix, "-listen", "127.0.0.1:0"), env)
	pc.all = append(pc.all, c)
	return c
}

// sqliteArgs are the refnode serve flags of a node on the SQLite database
// db with the SQLite clusters' fast timing: beat every procHeartbeat,
// evict after procEvictAfter, a clock ping every second. The broker is
// the caller's: -bus, or REFNODE_BUS in the environment.
func sqliteArgs(db string) []string {
	return []string{"-db", db, "-heartbeat", procHeartbeat.String(), "-evict-after", procEvictAfter.String(), "-ping-interval", "1s"}
}

// startSQLite starts one node per label on the cluster's SQLite file with
// env (the broker by REFNODE_BUS) and waits until they serve and agree
// (awaitAgreed); it returns the nodes, their UUIDs and their ring.
func (pc *procCluster) startSQLite(t *testing.T, ctx context.Context, labels, env []string) ([]*child, []string, ring.Ring) {
	t.Helper()
	var nodes []*child
	for _, label := range labels {
		nodes = append(nodes, pc.serve(t, label, sqliteArgs(pc.db), env))
	}
	ids, r := awaitAgreed(t, ctx, nodes)
	return nodes, ids, r
}

// queues returns the names of every queue the cluster's processes may
// have declared: api.portal, the dead-letter queue, and each process's
// service and membership queues.
func (pc *procCluster) queues() []string {
	queues := []string{pc.prefix + ".message.api.portal", pc.prefix + ".dead"}
	for _, c := range pc.all {
		for _, svc := range []string{api.HostService, api.ImageService, api.VMService, "cloudbus-membership"} {
			queues = append(queues, pc.prefix+".message."+svc+"."+c.id)
		}
	}
	return queues
}

// cleanup cleans the broker of the prefix and drops the cluster's
// tables, checking that none is left.
func (pc *procCluster) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cleanBroker(t, ctx, pc.broker, pc.prefix, pc.queues())
	if pc.tables == nil {
		return
	}
	if err := pc.tables.dropAll(ctx); err != nil {
		t.Errorf("drop the tables %s_*: %v", pc.tables.base, err)
	}
	if left, err := pc.tables.list(ctx); assert.NoError(t, err, "list the tables %s_*", pc.tables.base) {
		assert.Empty(t, left, "no table %s_* is left in the database", pc.tables.base)
	}
	assert.NoError(t, pc.tables.close())
}

// cleanBroker deletes the queues of prefix (those rabbitmqctl lists, and
// known, for when it is missing) and checks that none is left; then it
// checks that no exchange of prefix is left (its entry and broadcast
// exchanges are auto-delete: they go with their last binding) and
// deletes any that is.
func cleanBroker(t *testing.T, ctx context.Context, broker, prefix string, known []string) {
	t.Helper()
	if _, err := deleteQueues(ctx, broker, prefix, known); err != nil {
		t.Errorf("delete the queues %s.*: %v", prefix, err)
	}
	if left, ok, err := queuesWithPrefix(ctx, broker, prefix); ok {
		assert.NoError(t, err, "rabbitmqctl list_queues")
		assert.Empty(t, left, "no queue %s.* is left on the broker", prefix)
	}
	var left []string
	err := poll(ctx, func() error {
		out, ok, err := rabbitmqctl(ctx, broker, "list_exchanges", "name")
		if !ok || err != nil {
			return err
		}
		left = left[:0]
		for _, name := range strings.Fields(out) {
			if strings.HasPrefix(name, prefix+".") {
				left = append(left, name)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("exchanges left: %v", left)
		}
		return nil
	})
	if err == nil {
		return
	}
	t.Errorf("the auto-delete exchanges of %s outlived their queues: %v", prefix, err)
	conn, derr := dialBroker(broker, "refnode process test cleanup")
	if derr != nil {
		t.Errorf("delete exchanges %v: %v", left, derr)
		return
	}
	defer conn.Close()
	for _, x := range left {
		if derr := onChannel(ctx, conn, func(ch *amqp.Channel) error { return ch.ExchangeDelete(x, false, false) }); derr != nil {
			t.Errorf("delete exchange %s: %v", x, derr)
		}
	}
}

// awaitAgreed waits until each node is healthy, having printed its UUID,
// then until every ring holds exactly these nodes; it returns their UUIDs
// and the ring.
func awaitAgreed(t *testing.T, ctx context.Context, nodes []*child) ([]string, ring.Ring) {
	t.Helper()
	for _, c := range nodes {
		require.NoError(t, c.awaitHealthy(ctx))
		require.NotEmpty(t, c.id, "node %s printed its UUID", c.label)
	}
	ids := idsOf(nodes)
	r := ringOver(t, ids)
	require.NoError(t, poll(ctx, func() error { return agree(nodes, ids, r.Fingerprint()) }), "the rings converge")
	return ids, r
}

// agreeOn checks that every process serves, connected, with a ring of
// exactly these processes.
func agreeOn(procs []*child) error {
	ids := idsOf(procs)
	r, err := ringOf(ids)
	if err != nil {
		return err
	}
	return agree(procs, ids, r.Fingerprint())
}

// idsOf returns the processes' node UUIDs, in order.
func idsOf(procs []*child) []string {
	ids := make([]string, len(procs))
	for i, c := range procs {
		ids[i] = c.id
	}
	return ids
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
