package cloud_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

func TestJobState(t *testing.T) {
	for _, c := range []struct {
		s        cloud.JobState
		str      string
		terminal bool
	}{
		{cloud.JobPending, "pending", false},
		{cloud.JobRunning, "running", false},
		{cloud.JobSucceeded, "succeeded", true},
		{cloud.JobFailed, "failed", true},
		{"paused", `unknown("paused")`, false},
		{"", `unknown("")`, false},
	} {
		assert.Equal(t, c.str, c.s.String())
		assert.Equal(t, c.terminal, c.s.Terminal(), "%s: terminal is succeeded or failed", c.str)
	}
}

// TestJobJSON: a job's JSON names, with the empty optional fields and a
// zero deadline left out.
func TestJobJSON(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	j := cloud.Job{UUID: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", Kind: "vm.migrate", Resource: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
		State: cloud.JobPending, CreatedAt: at, UpdatedAt: at, Version: 1}
	b, err := json.Marshal(j)
	require.NoError(t, err)
	assert.JSONEq(t, `{"uuid":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","kind":"vm.migrate","resource":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
		"state":"pending","created_at":"2025-06-01T12:00:00Z","updated_at":"2025-06-01T12:00:00Z","version":1}`, string(b))

	j.Args, j.Step, j.Node, j.Code, j.Error, j.Result, j.Deadline = `{}`, "checked", "n", "timeout", "late", `{"x":1}`, at.Add(time.Minute)
	b, err = json.Marshal(j)
	require.NoError(t, err)
	var back cloud.Job
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, j, back, "a job goes through JSON unchanged")
	for _, name := range []string{`"args":`, `"step":`, `"node":`, `"code":`, `"error":`, `"result":`, `"deadline":"2025-06-01T12:01:00Z"`} {
		assert.Contains(t, string(b), name)
	}
}
