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

	_ = hb.Deregister(ctx, node, epoch) // peers evicted the node
	w.Key = fence.NewKey(message.NewUUID(), "myapp.v1.StopVm", []byte(`{}`))
	_, err = f.Do(ctx, w, start)
	fmt.Println(errors.Is(err, fence.ErrStale), errors.Is(err, message.ErrNotOwner))
	// Output:
	// running, token 1 <nil>
	// running, token 1 <nil>
	// true true
}
