package memdb_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
)

// One store shared by two nodes; one of them dies and can no longer
// write, while the other takes its host over.
func Example() {
	ctx := context.Background()
	db := memdb.New()
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	const host = "932763162d054c04adaab6ab498c9139"
	_ = db.For(a).AddHost(ctx, cloud.Host{UUID: host, Status: cloud.HostConnected, ManagedBy: a})

	db.SetUnreachable(a, true) // node a dies
	_, err := db.For(a).UpdateHost(ctx, host, func(h *cloud.Host) error { h.Status = cloud.HostDisconnected; return nil })
	fmt.Println(errors.Is(err, memdb.ErrUnreachable))

	h, _ := db.For(b).UpdateHost(ctx, host, func(h *cloud.Host) error {
		h.ManagedBy, h.Takeovers = b, h.Takeovers+1
		return nil
	})
	fmt.Println(h.Status, h.ManagedBy == b, h.Takeovers)
	// Output:
	// true
	// connected true 1
}
