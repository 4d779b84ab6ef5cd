package sqlstore_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestSQLiteSharedFile runs three Stores, as three processes would, on
// one file: each beats its own nodes while all of them list and race to
// evict the same stale records. No call may fail ("database is locked"
// included), every stale record is evicted by exactly one caller, and
// every beat of a live node counts.
func TestSQLiteSharedFile(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	table := randomTable()
	var stores []*sqlstore.Store
	for range 3 {
		stores = append(stores, open(t, sqlstore.Config{URL: url, Table: table}))
	}
	ctx := t.Context()

	const victims, ownNodes, beats = 30, 3, 40
	type rec struct {
		node       string
		epoch, seq int64
	}
	var stale []rec
	for range victims {
		n := message.NewUUID()
		e, err := stores[0].Register(ctx, n)
		require.NoError(t, err)
		stale = append(stale, rec{n, e, 0})
	}

	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		errs   []error
		wins   = make([]atomic.Int32, victims)
		start  = make(chan struct{})
		own    = make(map[string]int64)
		ownMu  sync.Mutex
		listed atomic.Int64
	)
	report := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	for _, s := range stores {
		for range ownNodes {
			n := message.NewUUID()
			e, err := s.Register(ctx, n)
			require.NoError(t, err)
			ownMu.Lock()
			own[n] = e
			ownMu.Unlock()
			wg.Go(func() {
				<-start
				for range beats {
					if err := s.Beat(ctx, n, e); err != nil {
						report(err)
						return
					}
				}
			})
		}
		wg.Go(func() { // a lister
			<-start
			for range beats {
				recs, err := s.List(ctx)
				if err != nil {
					report(err)
					return
				}
				listed.Add(int64(len(recs)))
			}
		})
		for range 2 { // two evictors per store
			wg.Go(func() {
				<-start
				for i, r := range stale {
					ok, err := s.Evict(ctx, r.node, r.epoch, r.seq)
					if err != nil {
						report(err)
						return
					}
					if ok {
						wins[i].Add(1)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	require.Empty(t, errs, "no call may fail when Stores share a file (busy timeout, WAL)")
	for i, r := range stale {
		assert.Equal(t, int32(1), wins[i].Load(), "exactly one of 6 evictors in 3 Stores must win record %s", r.node)
	}
	recs, err := stores[2].List(ctx)
	require.NoError(t, err)
	got := make(map[string]heartbeat.Record)
	for _, r := range recs {
		got[r.Node] = r
	}
	for _, r := range stale {
		assert.NotContains(t, got, r.node, "an evicted record must be gone")
	}
	for n, e := range own {
		if assert.Contains(t, got, n) {
			assert.Equal(t, e, got[n].Epoch)
			assert.Equal(t, int64(beats), got[n].Seq, "every beat of a live node counts, whichever Store wrote it")
		}
	}
	assert.Positive(t, listed.Load())
}

// childEnv names the variables that make this test binary a child
// process of TestSQLiteProcesses.
const (
	childDB      = "CLOUDBUS_SQLSTORE_CHILD_DB"
	childTable   = "CLOUDBUS_SQLSTORE_CHILD_TABLE"
	childVictims = "CLOUDBUS_SQLSTORE_CHILD_VICTIMS"
	childStart   = "CLOUDBUS_SQLSTORE_CHILD_START"
)

// TestSQLiteProcesses runs three real processes (this test binary) on
// one database file. Each beats its own node, lists, and tries to evict
// the same stale records; every stale record must be won by exactly one
// process, and no process may see an error.
func TestSQLiteProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	url := sqliteURL(t)
	s := openFresh(t, url)
	ctx := t.Context()
	var victims []string
	for range 20 {
		n := message.NewUUID()
		e, err := s.Register(ctx, n)
		require.NoError(t, err)
		victims = append(victims, n+":"+strconv.FormatInt(e, 10))
	}
	startAt := time.Now().Add(time.Second).UnixNano() // all children open first, then race

	const procs = 3
	outs := make([]bytes.Buffer, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSQLiteChildProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(),
			childDB+"="+url,
			childTable+"="+s.Table(),
			childVictims+"="+strings.Join(victims, ","),
			childStart+"="+strconv.FormatInt(startAt, 10),
		)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	wins := make(map[string]int)
	selves := make(map[string]bool)
	for i, cmd := range cmds {
		err := cmd.Wait()
		require.NoError(t, err, "child %d failed:\n%s", i, outs[i].String())
		sc := bufio.NewScanner(&outs[i])
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if n, ok := strings.CutPrefix(line, "WON "); ok {
				wins[n]++
			}
			if n, ok := strings.CutPrefix(line, "SELF "); ok {
				selves[n] = true
			}
		}
	}
	for _, v := range victims {
		n, _, _ := strings.Cut(v, ":")
		assert.Equal(t, 1, wins[n], "exactly one of %d processes must evict %s", procs, n)
	}
	recs, err := s.List(ctx)
	require.NoError(t, err)
	require.Len(t, selves, procs)
	require.Len(t, recs, procs, "only the children's own records remain")
	for _, r := range recs {
		assert.True(t, selves[r.Node], "%s is a child's own record", r.Node)
		assert.Equal(t, int64(50), r.Seq, "every beat of every process counts")
	}
}

// TestSQLiteChildProcess is one child of TestSQLiteProcesses; run alone
// it skips.
func TestSQLiteChildProcess(t *testing.T) {
	url := os.Getenv(childDB)
	if url == "" {
		t.Skip("a child process of TestSQLiteProcesses")
	}
	start, err := strconv.ParseInt(os.Getenv(childStart), 10, 64)
	require.NoError(t, err)
	s := open(t, sqlstore.Config{URL: url, Table: os.Getenv(childTable)})
	ctx := t.Context()
	self := message.NewUUID()
	epoch, err := s.Register(ctx, self)
	require.NoError(t, err)
	fmt.Println("SELF " + self)
	time.Sleep(time.Until(time.Unix(0, start)))

	var wg sync.WaitGroup
	wg.Go(func() {
		for range 50 {
			assert.NoError(t, s.Beat(ctx, self, epoch))
			_, err := s.List(ctx)
			assert.NoError(t, err)
		}
	})
	for _, v := range strings.Split(os.Getenv(childVictims), ",") {
		n, e, _ := strings.Cut(v, ":")
		ep, err := strconv.ParseInt(e, 10, 64)
		require.NoError(t, err)
		ok, err := s.Evict(ctx, n, ep, 0)
		require.NoError(t, err)
		if ok {
			fmt.Println("WON " + n)
		}
	}
	wg.Wait()
}

// TestSQLiteSubsecondAges checks that SQLite ages are finer than
// CURRENT_TIMESTAMP's whole seconds.
func TestSQLiteSubsecondAges(t *testing.T) {
	t.Parallel()
	s := openFresh(t, sqliteURL(t))
	ctx := t.Context()
	n := message.NewUUID()
	_, err := s.Register(ctx, n)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	recs, err := s.List(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.GreaterOrEqual(t, recs[0].Age, 15*time.Millisecond, "20 ms after Register the age is about 20 ms")
	assert.Less(t, recs[0].Age, time.Second, "the age has millisecond resolution, not seconds")
	assert.Zero(t, recs[0].Age%time.Millisecond, "SQLite's clock has millisecond resolution")
	assert.Contains(t, s.ListSQL(), "unixepoch('subsec')", "the age is computed by SQLite")
}

// TestOpenDB uses a caller's pool, warns if it lacks WAL or a busy
// timeout, and leaves it open on Close.
func TestOpenDB(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "hb.db")
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))

	plain, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer plain.Close()
	s, err := sqlstore.OpenDB(t.Context(), plain, sqlstore.Config{Dialect: sqlstore.SQLite, Logger: logger})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	mu.Lock()
	assert.Contains(t, logs.String(), "without WAL or busy timeout", "a pool without a busy timeout is warned about")
	logs.Reset()
	mu.Unlock()
	require.NoError(t, plain.Ping(), "Close leaves the caller's pool open")

	good, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	defer good.Close()
	s, err = sqlstore.OpenDB(t.Context(), good, sqlstore.Config{Dialect: sqlstore.SQLite, Logger: logger})
	require.NoError(t, err)
	defer s.Close()
	mu.Lock()
	assert.NotContains(t, logs.String(), "WARN")
	mu.Unlock()
	assert.Equal(t, "sqlite (caller's *sql.DB)", s.MaskedURL())
	n := message.NewUUID()
	e, err := s.Register(t.Context(), n)
	require.NoError(t, err)
	require.NoError(t, s.Beat(t.Context(), n, e))

	// A URL gives the dialect and the name in errors and logs; it is
	// never connected to.
	named, err := sqlstore.OpenDB(t.Context(), good, sqlstore.Config{URL: "sqlite:" + path, Table: "hb_named"})
	require.NoError(t, err)
	defer named.Close()
	assert.Equal(t, sqlstore.SQLite, named.Dialect())
	assert.Equal(t, "sqlite:"+path, named.MaskedURL())

	_, err = sqlstore.OpenDB(t.Context(), good, sqlstore.Config{})
	assert.ErrorContains(t, err, "Dialect is required")
	_, err = sqlstore.OpenDB(t.Context(), good, sqlstore.Config{URL: "sqlite::memory:"})
	assert.ErrorContains(t, err, "sqlstore: config: URL sqlite::memory: is not a database file")
	_, err = sqlstore.OpenDB(t.Context(), nil, sqlstore.Config{Dialect: sqlstore.SQLite})
	assert.Error(t, err)
}

// TestSchemaVersion: reopening finds the schema current and migrates
// nothing; a schema newer than the code is refused.
func TestSchemaVersion(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "hb.db")
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	cfg := sqlstore.Config{URL: "sqlite:" + path, Logger: logger}

	s, err := sqlstore.Open(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	mu.Lock()
	assert.Contains(t, logs.String(), "schema migrated", "a new database is migrated from version 0")
	logs.Reset()
	mu.Unlock()

	s, err = sqlstore.Open(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	mu.Lock()
	assert.NotContains(t, logs.String(), "schema migrated", "a current schema is left alone")
	mu.Unlock()

	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`UPDATE cloudbus_heartbeat_meta SET version = ?`, sqlstore.SchemaVersion+1)
	require.NoError(t, err)
	_, err = sqlstore.Open(t.Context(), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "newer than this cloudbus knows")
}

// TestClosed: calls after Close fail with ErrClosed; Close is idempotent.
func TestClosed(t *testing.T) {
	t.Parallel()
	s, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: sqliteURL(t)})
	require.NoError(t, err)
	e, err := s.Register(t.Context(), "a")
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	_, err = s.Register(t.Context(), "a")
	assert.ErrorIs(t, err, heartbeat.ErrClosed)
	assert.ErrorIs(t, s.Beat(t.Context(), "a", e), heartbeat.ErrClosed)
	_, err = s.List(t.Context())
	assert.ErrorIs(t, err, heartbeat.ErrClosed)
	_, err = s.Evict(t.Context(), "a", e, 0)
	assert.ErrorIs(t, err, heartbeat.ErrClosed)
	assert.ErrorIs(t, s.Deregister(t.Context(), "a", e), heartbeat.ErrClosed)
	assert.ErrorIs(t, s.BeatBus(t.Context(), "a", e, false), heartbeat.ErrClosed)
	assert.ErrorIs(t, s.AddQueues(t.Context(), "a", []string{"q"}), heartbeat.ErrClosed)
	_, err = s.Queues(t.Context())
	assert.ErrorIs(t, err, heartbeat.ErrClosed)
	assert.ErrorIs(t, s.RemoveQueues(t.Context(), "a", []string{"q"}), heartbeat.ErrClosed)
}

// TestCancelWhileWaiting: a write that waits for SQLite's write lock
// returns when its ctx ends, with ctx's error, and changes nothing.
func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "hb.db")
	s := open(t, sqlstore.Config{URL: "sqlite:" + path})
	n := message.NewUUID()
	e, err := s.Register(t.Context(), n)
	require.NoError(t, err)

	// Another process holds the write lock.
	locker, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer locker.Close()
	conn, err := locker.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(t.Context(), `BEGIN IMMEDIATE`)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = s.Beat(ctx, n, e)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a Beat waiting for the lock returns ctx's error")
	assert.Less(t, time.Since(began), 2*time.Second, "and returns soon after ctx ends, not after the busy timeout")
	assert.False(t, errors.Is(err, heartbeat.ErrEvicted))

	_, err = conn.ExecContext(t.Context(), `ROLLBACK`)
	require.NoError(t, err)
	recs, err := s.List(t.Context())
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Zero(t, recs[0].Seq, "the cancelled Beat changed nothing")
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestMetaRowMissing: without the meta row no epoch can be issued;
// Register says so, and reopening the store recreates the row.
func TestMetaRowMissing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "hb.db")
	cfg := sqlstore.Config{URL: "sqlite:" + path}
	s := open(t, cfg)
	ctx := t.Context()
	e1, err := s.Register(ctx, "a")
	require.NoError(t, err)

	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`DELETE FROM cloudbus_heartbeat_meta`)
	require.NoError(t, err)
	_, err = s.Register(ctx, "b")
	require.ErrorContains(t, err, "meta row")

	again := open(t, cfg)
	e2, err := again.Register(ctx, "a")
	require.NoError(t, err)
	assert.Greater(t, e2, e1, "the epoch, from the database's clock, still moves on")
}
