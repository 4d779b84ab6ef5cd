package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

// readOpLog returns the entries of the op log at path.
func readOpLog(t *testing.T, path string) []opEntry {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []opEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e opEntry
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "line %q", sc.Text())
		out = append(out, e)
	}
	require.NoError(t, sc.Err())
	return out
}

// TestOpLog: handle, reject and release observations become one JSON line
// each with the fields audits and fault tests read; other observations
// are ignored; lines reach the file within a flush period without Close;
// Close writes a stop line, is idempotent, and drops later lines.
func TestOpLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.jsonl")
	node := message.NewUUID()
	l, err := openOpLog(path, node, 20*time.Millisecond, "test")
	require.NoError(t, err)
	start := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	deadline := start.Add(5 * time.Second)
	vm := message.NewUUID()
	svc := bus.ServiceID("vmInstance", node)
	late := message.ErrTimeout.WithDetails("the sender's deadline passed")
	l.Observe(bus.Observation{Op: bus.OpHandle, Type: "refnode.v1.GetVm", ServiceID: svc, ID: "e1", Resource: vm,
		Headers: map[string]string{HeaderOp: "op-1", "other": "x"}, Start: start, Deadline: deadline,
		Duration: 3 * time.Millisecond, Queued: time.Millisecond})
	l.Observe(bus.Observation{Op: bus.OpReject, Type: "refnode.v1.GetVm", ServiceID: svc, ID: "e2", Resource: vm,
		Headers: map[string]string{HeaderOp: "op-2"}, Start: start, Deadline: deadline, Err: late})
	l.Observe(bus.Observation{Op: bus.OpRelease, Type: "refnode.v1.StartVm", ServiceID: bus.APIPortal, ID: "e3",
		Start: start, Err: errors.New("bus: release: " + strings.Repeat("x", 400))})
	for _, op := range []bus.Op{bus.OpSend, bus.OpCall, bus.OpBroadcast, bus.OpReply, bus.OpEvent, bus.OpLateReply} {
		l.Observe(bus.Observation{Op: op, ServiceID: svc, ID: "ignored", Start: start})
	}

	var got []opEntry
	require.Eventually(t, func() bool {
		got = readOpLog(t, path)
		return len(got) == 4
	}, 2*time.Second, 5*time.Millisecond, "the lines reach the file within a flush period, without Close")
	assert.Equal(t, "start", got[0].Op)
	assert.Equal(t, node, got[0].Node)
	assert.Equal(t, "test", got[0].Detail)
	assert.Equal(t, opEntry{At: "2025-03-01T12:00:00.123456789Z", Op: "handle", Node: node, ServiceID: svc, Type: "refnode.v1.GetVm",
		ID: "e1", Resource: vm, OpID: "op-1", Deadline: "2025-03-01T12:00:05.123456789Z",
		QueuedNS: int64(time.Millisecond), DurationNS: int64(3 * time.Millisecond)}, got[1])
	assert.Equal(t, "reject", got[2].Op)
	assert.Equal(t, "op-2", got[2].OpID)
	assert.Equal(t, "timeout", got[2].Err, "the error's code")
	assert.Contains(t, got[2].Detail, "deadline passed")
	assert.Equal(t, "release", got[3].Op)
	assert.Empty(t, got[3].Deadline, "no deadline: empty")
	assert.Empty(t, got[3].OpID, "no x-op header: empty")
	assert.Equal(t, "internal", got[3].Err, "an error without a code is internal")
	assert.LessOrEqual(t, len(got[3].Detail), opLogDetail+len("…"), "long error texts are shortened")

	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "Close is idempotent")
	l.Observe(bus.Observation{Op: bus.OpHandle, ServiceID: svc, ID: "after-close", Start: start})
	got = readOpLog(t, path)
	require.Len(t, got, 5)
	assert.Equal(t, "stop", got[4].Op, "Close writes a stop line; nothing after it")
}

// TestOpLogConcurrent: observations from many goroutines make whole
// lines, unbuffered as well as buffered.
func TestOpLogConcurrent(t *testing.T) {
	for _, flush := range []time.Duration{0, opLogFlush} {
		t.Run(flush.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ops.jsonl")
			l, err := openOpLog(path, "n", flush, "")
			require.NoError(t, err)
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 200 {
						l.Observe(bus.Observation{Op: bus.OpHandle, ServiceID: "s", ID: string(rune('a'+g)) + string(rune('0'+i%10)), Start: time.Now()})
					}
				})
			}
			wg.Wait()
			require.NoError(t, l.Close())
			assert.Len(t, readOpLog(t, path), 2+8*200, "start, 1600 lines, stop")
		})
	}
}

// BenchmarkOpLog measures what the op log adds to each observation,
// buffered (refnode's choice, written out every 50 ms) and unbuffered
// (one write system call per line).
func BenchmarkOpLog(b *testing.B) {
	o := bus.Observation{Op: bus.OpHandle, Type: "refnode.v1.GetVm", ServiceID: bus.ServiceID("vmInstance", message.NewUUID()),
		ID: message.NewUUID(), Resource: message.NewUUID(), Headers: map[string]string{HeaderOp: "op-000001"},
		Start: time.Now(), Deadline: time.Now().Add(5 * time.Second), Duration: time.Millisecond}
	for _, c := range []struct {
		name  string
		flush time.Duration
	}{{"buffered", opLogFlush}, {"unbuffered", 0}} {
		b.Run(c.name, func(b *testing.B) {
			l, err := openOpLog(filepath.Join(b.TempDir(), "ops.jsonl"), "n", c.flush, "")
			require.NoError(b, err)
			defer l.Close()
			for b.Loop() {
				l.Observe(o)
			}
		})
	}
}
