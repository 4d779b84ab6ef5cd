package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
)

// Two stores on one SQLite file, as two processes on one machine would
// share it: one registers and beats, the other lists and evicts only
// with the epoch and sequence it listed.
func Example() {
	dir, _ := os.MkdirTemp("", "sqlstore-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	url := "sqlite:" + filepath.Join(dir, "heartbeat.db")

	node, err := sqlstore.Open(ctx, sqlstore.Config{URL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()
	peer, err := sqlstore.Open(ctx, sqlstore.Config{URL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer peer.Close()
	fmt.Println("dialect:", node.Dialect(), "table:", node.Table())

	const id = "3694776ab31a45709259254a018913ca"
	epoch, _ := node.Register(ctx, id)
	recs, _ := peer.List(ctx)
	seen := recs[0] // sequence 0, as the peer saw it
	fmt.Println("peer sees", seen.Node, "seq", seen.Seq)

	_ = node.Beat(ctx, id, epoch) // the node beats: sequence 1
	ok, _ := peer.Evict(ctx, id, seen.Epoch, seen.Seq)
	fmt.Println("evicted with a stale sequence:", ok)

	recs, _ = peer.List(ctx)
	ok, _ = peer.Evict(ctx, id, recs[0].Epoch, recs[0].Seq)
	fmt.Println("evicted with the current sequence:", ok)

	err = node.Beat(ctx, id, epoch)
	fmt.Println("the node's next beat:", errors.Is(err, heartbeat.ErrEvicted))
	// Output:
	// dialect: sqlite table: cloudbus_heartbeat
	// peer sees 3694776ab31a45709259254a018913ca seq 0
	// evicted with a stale sequence: false
	// evicted with the current sequence: true
	// the node's next beat: true
}

// A process that opens its pools itself gives the heartbeat store one of
// its own, beside the pool of its own tables, so that no beat waits for a
// connection behind the application's work. OpenDB never connects with
// the URL, which names the database in errors and logs, and leaves the
// pool open.
func ExampleOpenDB() {
	dir, _ := os.MkdirTemp("", "sqlstore-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	path := filepath.Join(dir, "app.db")
	dsn := "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate" // the settings Open uses

	app, err := sql.Open("sqlite", dsn) // the application's pool, for its tables
	if err != nil {
		fmt.Println(err)
		return
	}
	defer app.Close()
	app.SetMaxOpenConns(1)
	hb, err := sql.Open("sqlite", dsn) // the heartbeat store's, for nothing else
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hb.Close() // after the store
	hb.SetMaxOpenConns(4)
	if _, err := app.ExecContext(ctx, `CREATE TABLE app_items (id TEXT PRIMARY KEY)`); err != nil {
		fmt.Println(err)
		return
	}

	s, err := sqlstore.OpenDB(ctx, hb, sqlstore.Config{URL: "sqlite:" + path})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The application's work holds its one connection (a read: on
	// SQLite a write would hold the file's one write lock too)...
	busy, err := app.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	var items int
	_ = busy.QueryRowContext(ctx, `SELECT COUNT(*) FROM app_items`).Scan(&items)
	epoch, _ := s.Register(ctx, "3694776ab31a45709259254a018913ca")
	err = s.Beat(ctx, "3694776ab31a45709259254a018913ca", epoch) // ...and the beat does not wait for it
	fmt.Println("beat:", err)
	_ = busy.Rollback()
	recs, _ := s.List(ctx)
	fmt.Println("dialect:", s.Dialect(), "records:", len(recs))
	fmt.Println("named as given:", s.MaskedURL() == "sqlite:"+path)
	_ = s.Close()

	_, err = hb.ExecContext(ctx, `SELECT 1`)
	fmt.Println("the pool is still open:", err == nil)
	// Output:
	// beat: <nil>
	// dialect: sqlite records: 1
	// named as given: true
	// the pool is still open: true
}

// A node that cannot reach the message bus says so with each beat; its
// peers see in List for how long, by the database's clock.
func ExampleStore_BeatBus() {
	dir, _ := os.MkdirTemp("", "sqlstore-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := sqlstore.Open(ctx, sqlstore.Config{URL: "sqlite:" + filepath.Join(dir, "heartbeat.db")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	const id = "3694776ab31a45709259254a018913ca"
	epoch, _ := s.Register(ctx, id)
	_ = s.BeatBus(ctx, id, epoch, false) // the outage starts now
	time.Sleep(20 * time.Millisecond)
	_ = s.BeatBus(ctx, id, epoch, false) // keeps the outage's start
	recs, _ := s.List(ctx)
	fmt.Println("bus down for 20 ms or more:", recs[0].BusDown >= 20*time.Millisecond, "seq", recs[0].Seq)

	_ = s.BeatBus(ctx, id, epoch, true)
	recs, _ = s.List(ctx)
	fmt.Println("after a beat with the bus up:", recs[0].BusDown)
	// Output:
	// bus down for 20 ms or more: true seq 2
	// after a beat with the bus up: 0s
}

// A node records the durable queues it declares, so that if it dies the
// survivors find them, in the store, and drain them.
func ExampleStore_AddQueues() {
	dir, _ := os.MkdirTemp("", "sqlstore-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := sqlstore.Open(ctx, sqlstore.Config{URL: "sqlite:" + filepath.Join(dir, "heartbeat.db")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	const id = "3694776ab31a45709259254a018913ca"
	_ = s.AddQueues(ctx, id, []string{"cloudbus.vm.inbox", "cloudbus.vm.events"})
	_ = s.AddQueues(ctx, id, []string{"cloudbus.vm.inbox"}) // already recorded: a no-op
	queues, _ := s.Queues(ctx)
	fmt.Println(queues[id])

	// A survivor drained one of them.
	_ = s.RemoveQueues(ctx, id, []string{"cloudbus.vm.events", "never.recorded"})
	queues, _ = s.Queues(ctx)
	fmt.Println(queues[id])
	// Output:
	// [cloudbus.vm.events cloudbus.vm.inbox]
	// [cloudbus.vm.inbox]
}

// A node holds its session lock for its life; a peer that finds the lock
// free knows no live session holds it: here the node released it, as the
// database does when the node's process dies.
func ExampleStore_HoldSession() {
	dir, _ := os.MkdirTemp("", "sqlstore-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	url := "sqlite:" + filepath.Join(dir, "heartbeat.db")

	node, err := sqlstore.Open(ctx, sqlstore.Config{URL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()
	peer, err := sqlstore.Open(ctx, sqlstore.Config{URL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer peer.Close()

	const id = "3694776ab31a45709259254a018913ca"
	hold, err := node.HoldSession(ctx, id)
	if err != nil {
		fmt.Println(err)
		return
	}
	free, _ := peer.SessionFree(ctx, id)
	fmt.Println("free while the node holds it:", free)
	_, err = peer.HoldSession(ctx, id)
	fmt.Println("another process as the same node:", errors.Is(err, heartbeat.ErrSessionHeld))

	_ = hold.Release()
	free, _ = peer.SessionFree(ctx, id)
	fmt.Println("free once released:", free)
	// Output:
	// free while the node holds it: false
	// another process as the same node: true
	// free once released: true
}
