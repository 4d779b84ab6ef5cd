package main

import (
	"encoding/json"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/testenv"
)

// TestScale runs refnode scale on 10 nodes with a short heartbeat: a
// join, a leave and a kill, each known to the store and then agreed on
// by every ring, within an eviction threshold of the store knowing. (The
// heap per node is not checked: other tests share this process's heap.)
func TestScale(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector is on: CI runs TestScale without it, in the serial step (its timings and heap figures assume a process to itself)")
	}
	code, out, errOut := runCmd(t, nil, "scale", "-nodes", "10", "-heartbeat", "100ms", "-evict-after", "1s", "-o", "json")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	r := checkScale(t, out, 10)
	assert.Positive(t, r.StoreCallsPerS)
	assert.Greater(t, r.Events[2].StoreMS, 500.0, "a kill is known at its eviction, not before")
	t.Logf("10 nodes: %+v", r)

	code, _, errOut = runCmd(t, nil, "scale", "-nodes", "2")
	assert.Equal(t, 2, code, errOut)
	code, out, _ = runCmd(t, nil, "scale", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "-nodes n")
}

// checkScale checks a report of 3 events: each known to the store and
// then agreed on by every ring within the eviction threshold (1 s).
func checkScale(t *testing.T, out string, nodes int) scaleReport {
	t.Helper()
	var r scaleReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.Equal(t, nodes, r.Nodes)
	require.Len(t, r.Events, 3)
	for i, name := range []string{"join", "leave", "kill"} {
		e := r.Events[i]
		assert.Equal(t, name, e.Event)
		assert.GreaterOrEqual(t, e.AgreedMS, e.StoreMS, "%s: agreed after the store knew", name)
		assert.Less(t, e.AfterStoreMS, 1000.0, "%s: every ring agreed within the eviction threshold of the store knowing", name)
	}
	return r
}

// TestScalePostgres runs refnode scale on 10 nodes whose heartbeat store
// is PostgreSQL (its tables dropped at the end).
func TestScalePostgres(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector is on: CI runs TestScalePostgres without it, in the serial step")
	}
	dsn := testenv.PostgresDSN(t)
	code, out, errOut := runCmd(t, nil, "scale", "-nodes", "10", "-heartbeat", "100ms", "-evict-after", "1s", "-db", dsn, "-o", "json")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	r := checkScale(t, out, 10)
	assert.Contains(t, r.Store, "postgres://")
	assert.Positive(t, r.StoreCallsPerS)
	assert.Greater(t, r.Events[2].StoreMS, 500.0, "a kill is known at its eviction, not before")
	t.Logf("10 nodes on PostgreSQL: %+v", r)
	code, _, errOut = runCmd(t, nil, "scale", "-processes", "3", "-db", dsn)
	assert.Equal(t, exitUsage, code, "-processes needs -bus: %s", errOut)
}

// TestScaleProcesses runs refnode scale on 3 refnode serve processes on
// RabbitMQ and PostgreSQL: a join, a SIGTERM and a SIGKILL.
func TestScaleProcesses(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "starts refnode serve processes", FullSpeed: true, Timeout: 3 * time.Minute})
	dsn := testenv.PostgresDSN(t)
	out, err := exec.CommandContext(ctx, refnodeBin, "scale", "-processes", "3", "-bus", broker, "-db", dsn,
		"-heartbeat", "100ms", "-evict-after", "1s", "-o", "json").Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("refnode scale: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	r := checkScale(t, string(out), 3)
	assert.Equal(t, "processes", r.Where)
	assert.Positive(t, r.RSSPerNodeKB)
	t.Logf("3 processes: %+v", r)
}
