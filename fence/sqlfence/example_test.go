package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/message"
)

// A node writes a VM's state in a fenced, idempotent transaction; a
// redelivery of the message gets the first reply; once peers evicted the
// node, its write is refused and nothing is written.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sqlfence")
	defer os.RemoveAll(dir)
	// One database for the heartbeat store and the fence; on SQLite,
	// transactions begin with BEGIN IMMEDIATE.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "cluster.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	hb, err := sqlstore.OpenDB(ctx, db, sqlstore.Config{Dialect: sqlstore.SQLite})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hb.Close()
	f, err := sqlfence.Open(ctx, db, sqlfence.Config{Dialect: hb.Dialect(), HeartbeatTable: hb.Table()})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE vms (uuid TEXT PRIMARY KEY, state TEXT)`); err != nil {
		fmt.Println(err)
		return
	}
	node := message.NewUUID()
	epoch, _ := hb.Register(ctx, node)
	vm := message.NewUUID()
	// In a handler: w := fence.For(ctx, r).
	w := fence.Guard{
		Claim: fence.Claim{Resource: vm, Node: node, Epoch: epoch},
		Key:   fence.NewKey(message.NewUUID(), "myapp.v1.StartVm", []byte(`{"vm_uuid":"`+vm+`"}`)),
	}
	start := func(ctx context.Context, tx *sql.Tx, tok fence.Token) ([]byte, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO vms (uuid, state) VALUES (?, 'running') ON CONFLICT (uuid) DO UPDATE SET state = 'running'`, vm)
		return fmt.Appendf(nil, "running, token %d", tok), err
	}
	reply, err := f.Do(ctx, w, start)
	fmt.Println(string(reply), err)
	reply, err = f.Do(ctx, w, start) // redelivered
	fmt.Println(string(reply), err)

	_ = hb.Deregister(ctx, node, epoch) // the node left, or peers evicted it: its record is gone
	w.Key = fence.NewKey(message.NewUUID(), "myapp.v1.StopVm", []byte(`{}`))
	_, err = f.Do(ctx, w, start)
	fmt.Println(errors.Is(err, fence.ErrStale), errors.Is(err, message.ErrNotOwner))
	// Output:
	// running, token 1 <nil>
	// running, token 1 <nil>
	// true true
}

// VmStarted is the typed reply of a StartVm handler.
type VmStarted struct {
	VM    string      `json:"vm"`
	State string      `json:"state"`
	Token fence.Token `json:"token"`
}

// A handler's fenced write with a typed reply: Run records the reply as
// JSON with the transaction, and a redelivery of the message gets the
// same VmStarted back without running the write again. A reply recorded
// as another type fails with bad_reply instead of a zero value.
func ExampleRun() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sqlfence")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "cluster.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	hb, err := sqlstore.OpenDB(ctx, db, sqlstore.Config{Dialect: sqlstore.SQLite})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hb.Close()
	f, err := sqlfence.Open(ctx, db, sqlfence.Config{Dialect: hb.Dialect(), HeartbeatTable: hb.Table()})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE vms (uuid TEXT PRIMARY KEY, state TEXT, starts INTEGER)`); err != nil {
		fmt.Println(err)
		return
	}
	node := message.NewUUID()
	epoch, _ := hb.Register(ctx, node)
	vm := "932763162d054c04adaab6ab498c9139"
	// In a handler: g := fence.For(ctx, r).
	g := fence.Guard{
		Claim: fence.Claim{Resource: vm, Node: node, Epoch: epoch},
		Key:   fence.NewKey(message.NewUUID(), "myapp.v1.StartVm", []byte(`{"vm_uuid":"`+vm+`"}`)),
	}
	start := func(ctx context.Context, tx *sql.Tx, tok fence.Token) (VmStarted, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO vms (uuid, state, starts) VALUES (?, 'running', 1)
			ON CONFLICT (uuid) DO UPDATE SET state = 'running', starts = starts + 1`, vm)
		return VmStarted{VM: vm, State: "running", Token: tok}, err
	}
	reply, err := sqlfence.Run(ctx, f, g, start)
	fmt.Printf("%+v %v\n", reply, err)
	reply, err = sqlfence.Run(ctx, f, g, start) // redelivered
	fmt.Printf("%+v %v\n", reply, err)
	var starts int
	_ = db.QueryRowContext(ctx, `SELECT starts FROM vms WHERE uuid = ?`, vm).Scan(&starts)
	fmt.Println("starts:", starts)

	// The same message read back as another type.
	_, err = sqlfence.Run(ctx, f, g, func(context.Context, *sql.Tx, fence.Token) (string, error) { return "", nil })
	fmt.Println(errors.Is(err, message.ErrBadReply))
	// Output:
	// {VM:932763162d054c04adaab6ab498c9139 State:running Token:1} <nil>
	// {VM:932763162d054c04adaab6ab498c9139 State:running Token:1} <nil>
	// starts: 1
	// true
}
