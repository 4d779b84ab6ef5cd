package main

import (
	"bytes"
	"flag"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// env is a fake environment that records which variables were read.
type env struct {
	mu   sync.Mutex
	vars map[string]string
	read []string
}

func (e *env) get(k string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.read = append(e.read, k)
	return e.vars[k]
}

func runCmd(t *testing.T, e *env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if e == nil {
		e = &env{}
	}
	var out, errb bytes.Buffer
	code = run(t.Context(), args, &out, &errb, e.get)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"demo", "-help"}} {
		code, out, _ := runCmd(t, nil, args...)
		assert.Equal(t, 0, code, "%v", args)
		for _, cmd := range []string{"[demo]", "serve", "ctl", "bench"} {
			assert.Contains(t, out, "refnode "+cmd)
		}
		assert.Contains(t, out, "REFNODE_VERBOSE")
	}
	code, _, errOut := runCmd(t, nil, "frobnicate")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `unknown command "frobnicate"`)
	code, _, errOut = runCmd(t, nil, "demo", "extra")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `unexpected argument "extra"`)
	code, _, errOut = runCmd(t, nil, "-latency", "-1s")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "-latency must not be negative")
}

// TestEnvironment: REFNODE_* set a flag not given on the command line; a
// flag given wins; a bad value names the variable.
func TestEnvironment(t *testing.T) {
	newFS := func() (*flag.FlagSet, *time.Duration, *bool) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		return fs, fs.Duration("latency", time.Second, ""), fs.Bool("v", false, "")
	}
	names := map[string]string{"latency": "REFNODE_LATENCY", "v": "REFNODE_VERBOSE"}
	e := &env{vars: map[string]string{"REFNODE_LATENCY": "5ms", "REFNODE_VERBOSE": "true"}}

	fs, lat, v := newFS()
	require.NoError(t, parseFlags(fs, nil, e.get, names))
	assert.Equal(t, 5*time.Millisecond, *lat)
	assert.True(t, *v)

	fs, lat, v = newFS()
	require.NoError(t, parseFlags(fs, []string{"-latency=7ms", "-v=false"}, e.get, names))
	assert.Equal(t, 7*time.Millisecond, *lat, "the flag wins")
	assert.False(t, *v)

	code, _, errOut := runCmd(t, &env{vars: map[string]string{"REFNODE_LATENCY": "soon"}})
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `REFNODE_LATENCY="soon"`)
}

// TestDefaultRunsTheDemo: refnode with no arguments runs the demo and
// exits 0, reading REFNODE_* variables and never CLOUDBUS_* ones.
func TestDefaultRunsTheDemo(t *testing.T) {
	e := &env{vars: map[string]string{"REFNODE_LATENCY": "1ms", "CLOUDBUS_AMQP_URL": "amqp://nowhere"}}
	code, out, errOut := runCmd(t, e)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	assert.Contains(t, out, "refnode demo: 3 management nodes")
	assert.Contains(t, out, "cloudbus.message.api.portal")
	assert.Contains(t, out, "was evicted")
	assert.Empty(t, errOut, "no logs without -v")
	assert.Contains(t, e.read, "REFNODE_VERBOSE")
	for _, k := range e.read {
		assert.False(t, strings.HasPrefix(k, "CLOUDBUS_"), "refnode read %s", k)
	}
}
