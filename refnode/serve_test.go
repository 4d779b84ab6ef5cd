package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// password is a broker password that must never be printed.
const password = "Pw-refnode-never-printed"

// noCloudbusVars asserts that refnode read no CLOUDBUS_* variable.
func noCloudbusVars(t *testing.T, e *env) {
	t.Helper()
	for _, k := range e.read {
		assert.False(t, strings.HasPrefix(k, "CLOUDBUS_"), "refnode read %s", k)
	}
}

// TestServeNeedsABus: without -bus, serve says why it needs one and
// exits 2, even when the test suites' CLOUDBUS_AMQP_URL is set.
func TestServeNeedsABus(t *testing.T) {
	e := &env{vars: map[string]string{"CLOUDBUS_AMQP_URL": "amqp://guest:guest@127.0.0.1:5672/"}}
	code, out, errOut := runCmd(t, e, "serve")
	assert.Equal(t, 2, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "-bus (or REFNODE_BUS) is required")
	assert.Contains(t, errOut, "An in-memory bus cannot span processes")
	assert.Contains(t, errOut, `refnode serve -h`)
	assert.Contains(t, e.read, "REFNODE_BUS")
	noCloudbusVars(t, e)
}

// TestServeFlags: every bad flag is reported at once, with exit 2.
func TestServeFlags(t *testing.T) {
	code, _, errOut := runCmd(t, nil, "serve", "-bus", "http://u:"+password+"@127.0.0.1/", "-db", "sqlite::memory:",
		"-log-level", "loud", "-heartbeat", "1s", "-evict-after", "1s", "-prefix", "a..b", "-ring", "jump", "extra")
	assert.Equal(t, 2, code)
	for _, want := range []string{
		`unexpected argument "extra"`, "is not an amqp:// or amqps:// URL", `-log-level "loud"`,
		"EvictAfter 1s must be at least twice Interval 1s", "in-memory SQLite", `-prefix "a..b"`, `-ring "jump": use table or consistent`,
	} {
		assert.Contains(t, errOut, want)
	}
	assert.NotContains(t, errOut, password, "a password is never printed")

	code, out, _ := runCmd(t, nil, "serve", "-h")
	assert.Equal(t, 0, code)
	for _, v := range []string{"REFNODE_BUS", "REFNODE_DB", "REFNODE_LISTEN", "REFNODE_PREFIX", "REFNODE_LOG_LEVEL", "REFNODE_HEARTBEAT", "REFNODE_EVICT_AFTER",
		"REFNODE_PING_INTERVAL", "REFNODE_OP_LOG", "REFNODE_CLOCK_SKEW", "REFNODE_TEST_HOOKS", "REFNODE_RING"} {
		assert.Contains(t, out, v, "serve -h names every variable")
	}
	def := heartbeat.DefaultConfig()
	assert.Contains(t, out, "heartbeat interval ("+def.Interval.String()+")", "serve -h shows heartbeat.DefaultConfig's interval")
	assert.Contains(t, out, "for this long ("+def.EvictAfter.String()+")", "serve -h shows heartbeat.DefaultConfig's eviction threshold")
	assert.Contains(t, out, "for fault tests only", "serve -h says what -clock-skew is for")

	code, _, errOut = runCmd(t, nil, "serve", "-bus", "amqp://127.0.0.1/", "-clock-skew", "soon")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `invalid value "soon" for flag -clock-skew`)
	code, _, errOut = runCmd(t, &env{vars: map[string]string{"REFNODE_CLOCK_SKEW": "1"}}, "serve", "-bus", "amqp://127.0.0.1/")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `REFNODE_CLOCK_SKEW="1"`, "a bad variable is named")
}

// TestServeEnvironment: REFNODE_* set the flags not given; defaults are
// heartbeat.DefaultConfig's and a free port on 127.0.0.1.
func TestServeEnvironment(t *testing.T) {
	o, err := parseServe([]string{"-bus", "amqp://127.0.0.1/"}, (&env{}).get)
	require.NoError(t, err)
	assert.Equal(t, "sqlite:refnode.db", o.DB)
	assert.Equal(t, "127.0.0.1:0", o.Listen)
	assert.Equal(t, bus.DefaultPrefix, o.Prefix)
	assert.Equal(t, heartbeat.DefaultConfig().Interval, o.Heartbeat.Interval)
	assert.Equal(t, heartbeat.DefaultConfig().EvictAfter, o.Heartbeat.EvictAfter)
	assert.Empty(t, o.opLog, "no op log by default")
	assert.Zero(t, o.clockSkew, "no clock skew by default")
	assert.Equal(t, 30*time.Second, o.vmSweep)
	assert.Equal(t, "table", o.Ring, "the default partition table by default")
	assert.Nil(t, o.Heartbeat.Now, "the heartbeat reads time.Now by default")
	assert.True(t, o.Heartbeat.SessionLocks, "session locks on by default")
	assert.Equal(t, 30*time.Second, o.StartWait, "a start waits 30 s for the database and the broker by default")

	e := &env{vars: map[string]string{
		"REFNODE_BUS": "amqps://broker/", "REFNODE_DB": "postgres://db/x", "REFNODE_LISTEN": "127.0.0.1:9999",
		"REFNODE_PREFIX": "blue", "REFNODE_LOG_LEVEL": "debug", "REFNODE_HEARTBEAT": "200ms",
		"REFNODE_EVICT_AFTER": "1s", "REFNODE_PING_INTERVAL": "50ms", "REFNODE_OP_LOG": "/tmp/ops.jsonl",
		"REFNODE_CLOCK_SKEW": "-1s", "REFNODE_VM_SWEEP": "2s", "REFNODE_TEST_STALL_VM_FINAL_WRITE": "3s",
		"REFNODE_RING": "consistent", "REFNODE_QUEUE_TYPE": "quorum", "REFNODE_SESSION_LOCKS": "false",
		"REFNODE_START_WAIT": "5s",
	}}
	o, err = parseServe([]string{"-prefix", "green", "-clock-skew", "1500ms"}, e.get)
	require.NoError(t, err)
	assert.Equal(t, serveOptions{
		Settings: nodekit.Settings{Bus: "amqps://broker/", QueueType: "quorum", DB: "postgres://db/x", Listen: "127.0.0.1:9999", Prefix: "green", LogLevel: "debug",
			Heartbeat: heartbeat.Config{Interval: 200 * time.Millisecond, EvictAfter: time.Second, OpTimeout: 200 * time.Millisecond},
			Ring:      "consistent", Trace: "none", StartWait: 5 * time.Second},
		pingInterval: 50 * time.Millisecond, opLog: "/tmp/ops.jsonl", clockSkew: 1500 * time.Millisecond,
		vmSweep: 2 * time.Second, stallVMFinal: 3 * time.Second,
	}, o, "variables fill the flags not given; a flag wins")
	o, err = parseServe(nil, e.get)
	require.NoError(t, err)
	assert.Equal(t, -time.Second, o.clockSkew, "REFNODE_CLOCK_SKEW takes a negative duration")
	noCloudbusVars(t, e)
}

// TestServeWithoutBroker: a broker that refuses the connection for
// longer than -start-wait fails the start with exit 1 and a message that
// says what to check, after the facts were printed, with the password
// masked everywhere, the retries' logs included.
func TestServeWithoutBroker(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "refnode.db")
	code, out, errOut := runCmd(t, nil, "serve", "-bus", "amqp://refnode:"+password+"@127.0.0.1:1/", "-db", db, "-prefix", "serve-test", "-start-wait", "1s")
	assert.Equal(t, 1, code, "stderr: %s", errOut)
	assert.Regexp(t, `(?m)^node: +[0-9a-f]{32}$`, out)
	assert.Regexp(t, `(?m)^admin: +http://127\.0\.0\.1:\d+ `, out)
	assert.Contains(t, out, "bus:     amqp://refnode:xxxxx@127.0.0.1:1/")
	assert.Contains(t, out, "db:      "+db+" (tables serve_test_heartbeat, serve_test_refnode_*)")
	assert.Contains(t, errOut, "connect to the broker")
	assert.Contains(t, errOut, "check -bus and that RabbitMQ runs")
	assert.Contains(t, errOut, "the broker does not answer yet; trying again", "each refusal is logged")
	assert.Contains(t, errOut, "-start-wait)", "the error says how long it tried")
	assert.NotContains(t, out+errOut, password, "a password is never printed")
}

// TestServeRing: -ring picks the ring each node routes with, empty, and
// serve says which when it is not the default.
func TestServeRing(t *testing.T) {
	for kind, want := range map[string]ring.Ring{"table": &ring.Table{}, "consistent": &ring.Consistent{}} {
		r, err := nodekit.NewRing(kind)
		require.NoError(t, err)
		assert.IsType(t, want, r, kind)
		assert.Empty(t, r.Members(), kind)
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "refnode.db")
	code, out, errOut := runCmd(t, nil, "serve", "-bus", "amqp://127.0.0.1:1/", "-db", db, "-prefix", "serve-test", "-ring", "consistent", "-start-wait", "0")
	assert.Equal(t, 1, code, "stderr: %s", errOut)
	assert.Contains(t, out, "ring:    consistent (")
	_, out, _ = runCmd(t, nil, "serve", "-bus", "amqp://127.0.0.1:1/", "-db", db, "-prefix", "serve-test", "-start-wait", "0")
	assert.NotContains(t, out, "ring:", "the default ring goes without saying")
}

// TestServeOpLog: with -op-log, serve appends its start line, naming the
// node it printed, to the file before it connects anywhere, and says
// where the log goes; with -clock-skew it says the clock is skewed.
func TestServeOpLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ops.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"op":"earlier"}`+"\n"), 0o644))
	code, out, errOut := runCmd(t, nil, "serve", "-bus", "amqp://refnode:"+password+"@127.0.0.1:1/", "-db", "sqlite:"+filepath.Join(dir, "refnode.db"),
		"-prefix", "serve-test", "-op-log", path, "-clock-skew", "-1s", "-start-wait", "0")
	assert.Equal(t, 1, code, "stderr: %s", errOut)
	assert.Contains(t, out, "op log:  "+path+" (")
	assert.Contains(t, out, "clock:   skewed by -1s (")
	m := nodeLine.FindStringSubmatch(out)
	require.NotNil(t, m, "serve printed its node: %s", out)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, lines, 3, "the earlier line is kept, then start and stop: %s", data)
	assert.JSONEq(t, `{"op":"earlier"}`, lines[0], "the op log is appended to")
	var start, stop opEntry
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &start))
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &stop))
	assert.Equal(t, "start", start.Op)
	assert.Equal(t, m[1], start.Node, "the start line names the node serve printed")
	assert.Contains(t, start.Detail, "clock skew -1s")
	assert.Equal(t, "stop", stop.Op)
	_, err = time.Parse(time.RFC3339Nano, start.At)
	assert.NoError(t, err, "at is RFC 3339")

	code, _, errOut = runCmd(t, nil, "serve", "-bus", "amqp://127.0.0.1:1/", "-db", "sqlite:"+filepath.Join(dir, "refnode.db"),
		"-op-log", filepath.Join(dir, "missing", "ops.jsonl"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "open the op log")
	assert.Contains(t, errOut, "check -op-log")
}

func TestCtlUsage(t *testing.T) {
	id := message.NewUUID()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ctl"}, 2, "give a command"},
		{[]string{"ctl", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"ctl", "get-vm"}, 2, "give one UUID"},
		{[]string{"ctl", "get-vm", "nope"}, 2, "invalid UUID"},
		{[]string{"ctl", "create-vm"}, 2, "give the UUID of the image"},
		{[]string{"ctl", "add-host", id, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"ctl", "set-image-name", id}, 2, "give the image's UUID and its new name"},
		{[]string{"ctl", "set-image-name", "nope", "n"}, 2, "invalid UUID"},
		{[]string{"ctl", "set-image-name", id, "n", "-if", "m"}, 2, "give the image's UUID and its new name"},
		{[]string{"ctl", "get-vm", id}, 2, "-bus (or REFNODE_BUS) is required"},
		{[]string{"ctl", "get-vm", "-bus", "http://127.0.0.1/", id}, 1, "not an amqp:// or amqps:// URL"},
		{[]string{"ctl", "-bus", "amqp://u:" + password + "@127.0.0.1:1/", "get-vm", id}, 1, "connect to the broker"},
	} {
		e := &env{vars: map[string]string{"CLOUDBUS_AMQP_URL": "amqp://guest:guest@127.0.0.1:5672/"}}
		code, out, errOut := runCmd(t, e, c.args...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		assert.Empty(t, out, "%v", c.args)
		assert.Contains(t, errOut, c.want, "%v", c.args)
		assert.NotContains(t, errOut, password, "a password is never printed")
		noCloudbusVars(t, e)
	}
	code, out, _ := runCmd(t, nil, "ctl", "-h")
	assert.Equal(t, 0, code)
	for _, cmd := range []string{"add-host", "add-image", "set-image-name", "create-vm", "start-vm", "stop-vm", "reboot-vm", "destroy-vm", "get-vm", "REFNODE_BUS"} {
		assert.Contains(t, out, cmd)
	}
}

// TestAdmin serves /healthz and /status from a node of an in-process
// cluster: the ring of every node, the same fingerprint on each.
func TestAdmin(t *testing.T) {
	c, err := startCluster(t.Context(), clusterConfig{nodes: 3, prefix: "admin-test", heartbeat: heartbeat.TestConfig(), hypervisor: simhv.Config{}, pingInterval: time.Second})
	require.NoError(t, err)
	defer c.close()
	var fingerprints []string
	for _, m := range c.all() {
		h := nodekit.NewAdmin(m.node, m.tr, "admin-test")
		svc := m.svc
		h.Section("vms", func() any { return vmStatus(svc.VM.Stats()) })
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		assert.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, "serving\n", rec.Body.String())

		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		var st nodeStatus
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &st))
		assert.Equal(t, m.node.UUID(), st.Node)
		assert.Equal(t, "serving", st.State)
		assert.Equal(t, "connected", st.Transport, "the in-memory transport reports its connection state too")
		assert.Positive(t, st.Epoch)
		assert.Len(t, st.Ring.Members, 3)
		assert.Equal(t, sweeperStatus{Sweeps: st.VMs.Sweeps}, st.VMs, "the VM sweeper's counters: nothing to repair")
		fingerprints = append(fingerprints, st.Ring.Fingerprint)
	}
	assert.Equal(t, fingerprints[0], fingerprints[1])
	assert.Equal(t, fingerprints[0], fingerprints[2])

	m := c.all()[0]
	require.NoError(t, m.node.Close())
	rec := httptest.NewRecorder()
	nodekit.NewAdmin(m.node, m.tr, "admin-test").ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "a node that left is not healthy")
}
