package sqldb_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

// Two stores on one SQLite file, as two management nodes on one machine
// open it: a host added through one is updated atomically through the
// other.
func Example() {
	dir, _ := os.MkdirTemp("", "sqldb-example-")
	defer os.RemoveAll(dir)
	url := "sqlite:" + filepath.Join(dir, "refnode.db")
	ctx := context.Background()

	pa, err := sqlconn.Open(sqlconn.Config{URL: url}) // node a's pool
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pa.Close()
	a, err := sqldb.Open(ctx, pa, sqldb.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	pb, _ := sqlconn.Open(sqlconn.Config{URL: url}) // node b's
	defer pb.Close()
	b, _ := sqldb.Open(ctx, pb, sqldb.Config{})
	defer b.Close()

	const host = "932763162d054c04adaab6ab498c9139"
	_ = a.AddHost(ctx, cloud.Host{UUID: host, Address: "10.0.0.11", Status: cloud.HostConnected})
	h, _ := b.UpdateHost(ctx, host, func(h *cloud.Host) error {
		h.ManagedBy, h.Takeovers = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", h.Takeovers+1
		return nil
	})
	fmt.Println(h.Address, h.Status, h.Takeovers)
	fmt.Println(a.Tables())
	// Output:
	// 10.0.0.11 connected 1
	// [refnode_hosts refnode_images refnode_vms refnode_jobs refnode_meta refnode_fence_tokens refnode_fence_once refnode_fence_meta]
}
