package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	var r scaleReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.Equal(t, 10, r.Nodes)
	assert.Positive(t, r.StoreCallsPerS)
	require.Len(t, r.Events, 3)
	for i, name := range []string{"join", "leave", "kill"} {
		e := r.Events[i]
		assert.Equal(t, name, e.Event)
		assert.GreaterOrEqual(t, e.AgreedMS, e.StoreMS, "%s: agreed after the store knew", name)
		assert.Less(t, e.AfterStoreMS, 1000.0, "%s: every ring agreed within the eviction threshold of the store knowing", name)
	}
	assert.Greater(t, r.Events[2].StoreMS, 500.0, "a kill is known at its eviction, not before")
	t.Logf("10 nodes: %+v", r)

	code, _, errOut = runCmd(t, nil, "scale", "-nodes", "2")
	assert.Equal(t, 2, code, errOut)
	code, out, _ = runCmd(t, nil, "scale", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "-nodes n")
}
