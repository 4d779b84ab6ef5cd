package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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

// MaskURL hides the password of any URL or DSN the store accepts.
func ExampleMaskURL() {
	fmt.Println(sqlstore.MaskURL("postgres://cloudbus:s3cret@db:5432/cloudbus?sslmode=require"))
	fmt.Println(sqlstore.MaskURL("cloudbus:s3cret@tcp(db:3306)/cloudbus"))
	// Output:
	// postgres://cloudbus:xxxxx@db:5432/cloudbus?sslmode=require
	// cloudbus:xxxxx@tcp(db:3306)/cloudbus
}
