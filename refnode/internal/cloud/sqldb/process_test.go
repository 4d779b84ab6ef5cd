package sqldb_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

// The child processes of TestSQLiteProcesses read their task from these.
const (
	childURL    = "SQLDB_TEST_CHILD_URL"
	childPrefix = "SQLDB_TEST_CHILD_PREFIX"
	childHost   = "SQLDB_TEST_CHILD_HOST"
	childStart  = "SQLDB_TEST_CHILD_START" // unix nanoseconds: all race from then
)

// childIncrements is how many increments each child makes.
const childIncrements = 40

// TestSQLiteProcesses has three processes share one SQLite file: each
// opens its own store (and pool) on the same tables, adds a VM, and
// increments one host's counter in read-modify-write updates, all at
// once. Nothing may fail ("database is locked" included) and no update
// may be lost.
func TestSQLiteProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	url := sqliteURL(t)
	s := openFresh(t, url)
	ctx := t.Context()
	host := message.NewUUID()
	require.NoError(t, s.AddHost(ctx, cloud.Host{UUID: host, Status: cloud.HostConnected}))
	prefix := s.Tables()[0][:len(s.Tables()[0])-len("_hosts")]
	start := time.Now().Add(time.Second).UnixNano() // every child opens first, then they race

	const procs = 3
	outs := make([]bytes.Buffer, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childURL+"="+url, childPrefix+"="+prefix, childHost+"="+host,
			childStart+"="+strconv.FormatInt(start, 10))
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child %d failed:\n%s", i, outs[i].String())
	}
	h, err := s.Host(ctx, host)
	require.NoError(t, err)
	assert.Equal(t, procs*childIncrements, h.Takeovers, "every update of every process counts")
	vms, err := s.VMs(ctx)
	require.NoError(t, err)
	assert.Len(t, vms, procs, "every process's add is seen")
}

// childMain is a child process of TestSQLiteProcesses. It returns the
// exit code.
func childMain() int {
	if err := child(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func child() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := sqlconn.Open(sqlconn.Config{URL: os.Getenv(childURL)})
	if err != nil {
		return err
	}
	defer p.Close()
	s, err := sqldb.Open(ctx, p, sqldb.Config{Prefix: os.Getenv(childPrefix)})
	if err != nil {
		return err
	}
	defer s.Close()
	start, err := strconv.ParseInt(os.Getenv(childStart), 10, 64)
	if err != nil {
		return err
	}
	time.Sleep(time.Until(time.Unix(0, start))) // a start line shared by the processes, not a wait for a condition
	if err := s.AddVM(ctx, cloud.VM{UUID: message.NewUUID(), State: cloud.VMCreated}); err != nil {
		return err
	}
	host := os.Getenv(childHost)
	for range childIncrements {
		if _, err := s.UpdateHost(ctx, host, func(h *cloud.Host) error { h.Takeovers++; return nil }); err != nil {
			return err
		}
	}
	return nil
}
