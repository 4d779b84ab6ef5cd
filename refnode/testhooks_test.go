package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeTestHooks: -test-hooks and REFNODE_TEST_HOOKS turn the hooks
// on, serve -h names them, and they are off by default.
func TestServeTestHooks(t *testing.T) {
	o, err := parseServe([]string{"-bus", "amqp://127.0.0.1/"}, (&env{}).get)
	require.NoError(t, err)
	assert.False(t, o.testHooks, "off by default")
	o, err = parseServe([]string{"-bus", "amqp://127.0.0.1/", "-test-hooks"}, (&env{}).get)
	require.NoError(t, err)
	assert.True(t, o.testHooks)
	e := &env{vars: map[string]string{"REFNODE_TEST_HOOKS": "true"}}
	o, err = parseServe([]string{"-bus", "amqp://127.0.0.1/"}, e.get)
	require.NoError(t, err)
	assert.True(t, o.testHooks, "REFNODE_TEST_HOOKS=true")

	code, out, _ := runCmd(t, nil, "serve", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "REFNODE_TEST_HOOKS")
	assert.Contains(t, out, "POST /test/stall-vm-final-write?for=d")
}

// TestStallHook: POST /test/stall-vm-final-write?for=d arms a one-shot
// stall that holds the next VM operation's final write for d (or until
// its context ends), logged at WARN; for=0 disarms it; a bad or missing
// d is refused; the admin's other routes are served as before.
func TestStallHook(t *testing.T) {
	var logs bytes.Buffer
	a := &stallArm{log: slog.New(slog.NewTextHandler(&logs, nil))}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("admin")) })
	h := withTestHooks(inner, a)
	post := func(query string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/test/stall-vm-final-write"+query, nil))
		return rec
	}
	for _, q := range []string{"", "?for=soon", "?for=-1s"} {
		assert.Equal(t, http.StatusBadRequest, post(q).Code, "query %q", q)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/test/stall-vm-final-write?for=1s", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code, "POST only")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	assert.Equal(t, "admin", rec.Body.String(), "the admin's routes are kept")

	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		start := time.Now()
		a.hold(ctx, "vm-0")
		assert.Zero(t, time.Since(start), "not armed: no stall")

		rec := post("?for=5s")
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Contains(t, rec.Body.String(), "armed")
		a.hold(ctx, "vm-1")
		assert.Equal(t, 5*time.Second, time.Since(start), "the armed stall holds the next operation for its length")
		start = time.Now()
		a.hold(ctx, "vm-2")
		assert.Zero(t, time.Since(start), "one shot: the next operation runs unstalled")

		require.Equal(t, http.StatusOK, post("?for=5s").Code)
		rec = post("?for=0s")
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Contains(t, rec.Body.String(), "disarmed")
		a.hold(ctx, "vm-3")
		assert.Zero(t, time.Since(start), "disarmed: no stall")

		require.Equal(t, http.StatusOK, post("?for=1m").Code)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		a.hold(cctx, "vm-4")
		assert.Equal(t, 2*time.Second, time.Since(start), "the operation's context ends the stall")
	})
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 4, "holding and over, for vm-1 and vm-4: %s", logs.String())
	assert.Contains(t, lines[0], "level=WARN")
	assert.Contains(t, lines[0], "test stall: holding a VM write after its hypervisor call, before its final write")
	assert.Contains(t, lines[0], "vm=vm-1")
	assert.Contains(t, lines[0], "for=5s")
	assert.Contains(t, lines[1], "test stall: over")
	assert.Contains(t, lines[2], "vm=vm-4")
}

// TestChainStalls: nil hooks are skipped, the others run in turn.
func TestChainStalls(t *testing.T) {
	assert.Nil(t, chainStalls(nil, nil))
	var order []string
	one := func(_ context.Context, vm string) { order = append(order, "one "+vm) }
	two := func(_ context.Context, vm string) { order = append(order, "two "+vm) }
	chainStalls(nil, one)(t.Context(), "a")
	chainStalls(one, nil, two)(t.Context(), "b")
	assert.Equal(t, []string{"one a", "one b", "two b"}, order)
}
