package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var apiLine = regexp.MustCompile(`(?m)^api: +http://(\S+)/v1/ `)

// TestServeREST: refnode serve -api-listen serves the REST API of its
// node on RabbitMQ and SQLite, behind -api-token: a VM created, started
// and listed over HTTP, each answer naming the node that handled it.
func TestServeREST(t *testing.T) {
	url := testenv.AMQPURL(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	prefix := "refnode-test-rest-" + randomHex(4)
	t.Cleanup(func() { // the shared queues outlive the node; its own go with it
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cleanBroker(t, ctx, url, prefix, []string{prefix + ".message.api.portal", prefix + ".dead"})
	})
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- serveCmd(ctx, []string{"-bus", url, "-db", "sqlite:" + filepath.Join(t.TempDir(), "refnode.db"), "-prefix", prefix,
			"-listen", "127.0.0.1:0", "-api-listen", "127.0.0.1:0", "-heartbeat", "200ms"}, &out, &errOut,
			func(k string) string {
				if k == "REFNODE_API_TOKEN" {
					return "t0ken"
				}
				return ""
			})
	}()
	var addr string
	require.Eventually(t, func() bool {
		s := out.String()
		if m := apiLine.FindStringSubmatch(s); m != nil && strings.Contains(s, "serving:") {
			addr = m[1]
			return true
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d: %s\n%s", code, s, errOut.String())
		default:
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "serve prints its API address and serves")
	assert.Contains(t, out.String(), "a bearer token is required")
	node := nodeLine.FindStringSubmatch(out.String())[1]

	do := func(method, path, body, token string) (int, http.Header, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(data, &m), "%s %s: %s", method, path, data)
		return resp.StatusCode, resp.Header, m
	}
	code, _, _ := do("GET", "/v1/vms", "", "")
	assert.Equal(t, http.StatusUnauthorized, code, "no token")
	code, _, _ = do("POST", "/v1/hosts", `{"name":"h"}`, "t0ken")
	require.Equal(t, http.StatusCreated, code)
	code, _, img := do("POST", "/v1/images", `{"name":"i"}`, "t0ken")
	require.Equal(t, http.StatusCreated, code)
	code, h, vm := do("POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img["uuid"]), "t0ken")
	require.Equal(t, http.StatusCreated, code, "%v", vm)
	assert.Equal(t, node, h.Get("Refnode-Node"), "the one node handled it")
	assert.Equal(t, node, h.Get("Refnode-Portal"), "through its portal")
	code, _, started := do("POST", fmt.Sprintf("/v1/vms/%s/start", vm["uuid"]), "", "t0ken")
	require.Equal(t, http.StatusOK, code, "%v", started)
	assert.Equal(t, "running", started["state"])
	code, h, list := do("GET", "/v1/vms?state=running", "", "t0ken")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "database", h.Get("Refnode-Source"))
	assert.Len(t, list["items"], 1)

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 0, code, "stderr: %s", errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not leave within 30 s")
	}
	assert.NotContains(t, errOut.String()+out.String(), "t0ken", "the token is never logged")
}

var embeddedLine = regexp.MustCompile(`(?m)^node ([A-Z]): +([0-9a-f]{32}) +api: http://(\S+)/v1/ +dashboard: http://\S+/$`)

// TestServeEmbedded: refnode serve -embedded 3 runs three nodes in one
// process, each serving the REST API: VMs created through one node's API
// and started through another's, each start handled by one node, the
// same that handles a later read (the VM's owner); the list through a
// third; an orderly stop.
// embedded is a refnode serve -embedded running in this process.
type embedded struct {
	nodes       [][]string // embeddedLine's matches: label, UUID, REST address
	out, errOut *lockedBuffer
	done        chan int // serveCmd's exit code
}

// startEmbedded runs refnode serve -embedded 3 until ctx ends.
func startEmbedded(t *testing.T, ctx context.Context) *embedded {
	t.Helper()
	e := &embedded{out: &lockedBuffer{}, errOut: &lockedBuffer{}, done: make(chan int, 1)}
	go func() {
		e.done <- serveCmd(ctx, []string{"-embedded", "3", "-api-listen", "127.0.0.1:0", "-heartbeat", "100ms", "-evict-after", "1s"}, e.out, e.errOut, func(string) string { return "" })
	}()
	require.Eventually(t, func() bool {
		s := e.out.String()
		if strings.Contains(s, "serving:") {
			e.nodes = embeddedLine.FindAllStringSubmatch(s, -1)
			return true
		}
		select {
		case code := <-e.done:
			t.Fatalf("serve exited %d: %s\n%s", code, s, e.errOut.String())
		default:
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "serve -embedded serves")
	require.Len(t, e.nodes, 3, e.out.String())
	return e
}

// TestServeEmbedded is the end-to-end test of the REST API on serve
// -embedded 3: 100 VMs created, started, stopped, migrated (each job
// accepted by one node and waited for through another) and destroyed,
// each step through another node's API, every answer about a VM and every
// job's last step from the VM's ring owner (which every node agrees on);
// then serve -embedded's flag errors.
func TestServeEmbedded(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e := startEmbedded(t, ctx)
	nodes, out, errOut, done := e.nodes, e.out, e.errOut, e.done
	ids := map[string]bool{}
	for _, n := range nodes {
		ids[n[2]] = true
	}
	do := func(node int, method, path, body string) (int, http.Header, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, "http://"+nodes[node][3]+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req) // no Content-Type: read as JSON
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		return resp.StatusCode, resp.Header, m
	}
	var hosts []string
	for i := range 2 {
		code, _, h := do(i, "POST", "/v1/hosts", fmt.Sprintf(`{"name":"h%d"}`, i))
		require.Equal(t, http.StatusCreated, code, "%v", h)
		hosts = append(hosts, h["uuid"].(string))
	}
	code, _, img := do(0, "POST", "/v1/images", `{"name":"i"}`)
	require.Equal(t, http.StatusCreated, code)
	// owner asks node i who owns id now.
	owner := func(i int, id string) string {
		t.Helper()
		code, _, o := do(i, "GET", "/v1/owner/"+id, "")
		require.Equal(t, http.StatusOK, code, "%v", o)
		require.Equal(t, true, o["agree"], "every node agrees on the owner of %s: %v", id, o)
		return o["owner"].(string)
	}
	// 100 VMs created, started, stopped, migrated (each job accepted by
	// one node and waited for through another) and destroyed, each step
	// through another node than the step before; every answer about a
	// VM, and every job's last step, from the VM's owner.
	const n = 100
	handled := map[string]bool{}
	start := time.Now()
	for i := range n {
		code, _, vm := do(i%3, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img["uuid"]))
		require.Equal(t, http.StatusCreated, code, "%v", vm)
		id := vm["uuid"].(string)
		want := owner((i+1)%3, id)
		for step, action := range []string{"start", "stop"} {
			code, h, got := do((i+step+1)%3, "POST", "/v1/vms/"+id+"/"+action, "")
			require.Equal(t, http.StatusOK, code, "%s: %v", action, got)
			assert.Equal(t, want, h.Get("Refnode-Node"), "%s of %s ran on its owner", action, id)
			handled[want] = true
		}
		target := hosts[0]
		if vm["host_uuid"] == target {
			target = hosts[1]
		}
		code, _, job := do((i+2)%3, "POST", "/v1/vms/"+id+"/migrate", fmt.Sprintf(`{"host_uuid":%q}`, target))
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, code, "migrate: %v", job)
		code, _, job = do((i+3)%3, "GET", fmt.Sprintf("/v1/jobs/%s?wait=10s", job["uuid"]), "")
		require.Equal(t, http.StatusOK, code, "%v", job)
		require.Equal(t, "succeeded", job["state"], "%v", job)
		assert.Equal(t, want, job["node"], "the last step of the migration of %s ran on its owner", id)
		code, h, got := do((i+4)%3, "POST", "/v1/vms/"+id+"/destroy", "")
		require.Equal(t, http.StatusOK, code, "%v", got)
		assert.Equal(t, target, got["host_uuid"], "destroyed on the host it moved to")
		assert.Equal(t, want, h.Get("Refnode-Node"))
	}
	t.Logf("%d VMs created, started, stopped, migrated and destroyed through 3 embedded nodes' APIs in %s; owners: %d of the 3 nodes",
		n, time.Since(start).Round(time.Millisecond), len(handled))
	code, _, list := do(2, "GET", "/v1/vms?state=destroyed&limit=1000", "")
	require.Equal(t, http.StatusOK, code)
	assert.Len(t, list["items"], n)
	code, _, jobs := do(1, "GET", "/v1/jobs?state=succeeded&limit=1000", "")
	require.Equal(t, http.StatusOK, code)
	assert.Len(t, jobs["items"], n)

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 0, code, "stderr: %s", errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve -embedded did not stop within 30 s")
	}
	assert.Contains(t, out.String(), "left:    in ")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-embedded", "3", "-bus", "amqp://127.0.0.1/"}, "drop -bus and -db"},
		{[]string{"-embedded", "30"}, "-embedded 30: run 1 to 9 nodes"},
		{[]string{"-embedded", "2", "-api-listen", "nope"}, "-api-listen"},
	} {
		var o, e bytes.Buffer
		code := serveCmd(t.Context(), c.args, &o, &e, func(string) string { return "" })
		assert.NotZero(t, code, "%v", c.args)
		assert.Contains(t, e.String(), c.want, "%v", c.args)
	}
}

// TestCtlREST drives an embedded cluster with refnode ctl RESOURCE VERB:
// tables, JSON and YAML, and the exit codes.
func TestCtlREST(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e := startEmbedded(t, ctx)
	api := "http://" + e.nodes[0][3]
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return runCmd(t, &env{vars: map[string]string{"REFNODE_API": api}}, append([]string{"ctl"}, args...)...)
	}
	code, out, errOut := ctl("host", "add", "-name", "h1", "-address", "10.0.0.1")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^UUID +NAME +ADDRESS +STATUS +MANAGED_BY\n[0-9a-f]{32} +h1 +10\.0\.0\.1 +connected +[0-9a-f]{32}\nhandled by node [0-9a-f]{32} through the portal of [0-9a-f]{32}\n$`, out)
	code, out, errOut = ctl("-o", "json", "image", "add", "-name", "debian", "-size-mb", "4194304")
	require.Equal(t, 0, code, errOut)
	var img map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &img), out)
	code, out, errOut = ctl("image", "list")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "4194304", "numbers in full")

	var vms []string
	for range 3 {
		code, out, errOut = ctl("vm", "create", "-o", "json", "-cpus", "2", img["uuid"].(string))
		require.Equal(t, 0, code, errOut)
		var vm map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &vm), out)
		vms = append(vms, vm["uuid"].(string))
	}
	code, out, errOut = ctl("vm", "start", "-o", "yaml", strings.ToUpper(vms[0]))
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "state: running\n")
	code, out, errOut = ctl("vm", "list", "-state", "created", "-limit", "1")
	require.Equal(t, 0, code, errOut)
	assert.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, "the header and one VM: %s", out)
	code, out, _ = ctl("vm", "list")
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^UUID +NAME +STATE +HOST +CPUS +MEMORY_MB +VERSION$`, out)
	assert.Equal(t, 3, strings.Count(out, " 2 "), "3 VMs of 2 CPUs: %s", out)

	code, _, errOut = ctl("vm", "reboot", vms[1])
	assert.Equal(t, 1, code, "refused: never started")
	assert.Contains(t, errOut, "refnode ctl vm reboot: conflict: ")
	assert.Contains(t, errOut, "(HTTP 409)")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %s", errOut)
	code, _, errOut = ctl("vm", "get", message.NewUUID())
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "not_found: ")
	code, _, errOut = ctl("vm", "get", "nope")
	assert.Equal(t, 2, code, "usage: %s", errOut)
	code, _, errOut = ctl("vm", "fly", vms[0])
	assert.Equal(t, 2, code, errOut)
	code, _, errOut = ctl("-o", "xml", "vm", "list")
	assert.Equal(t, 2, code, errOut)
	code, out, _ = ctl("vm", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "vm list [-state s]")
	code, _, errOut = runCmd(t, &env{vars: map[string]string{"REFNODE_API": "http://127.0.0.1:1"}}, "ctl", "-timeout", "600ms", "vm", "list")
	assert.Equal(t, 3, code, "nobody answers a read: %s", errOut)
	assert.Contains(t, errOut, "no answer from 127.0.0.1:1")
	code, _, errOut = runCmd(t, &env{vars: map[string]string{"REFNODE_API": "http://127.0.0.1:1"}}, "ctl", "-timeout", "600ms", "vm", "stop", vms[1])
	assert.Equal(t, 4, code, "a change with no answer: outcome unknown: %s", errOut)
	assert.Contains(t, errOut, "attempts")

	code, out, errOut = ctl("nodes")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `^NODE +STATE +EPOCH +REGISTERED +HEARTBEAT_AGE +SHARE +HOSTS +IMAGES +VMS\n`, out)
	assert.Regexp(t, `(?m) serving +[0-9]+ +20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z +[0-9.]+[mµn]?s `, out, "each node's registration time")
	assert.Equal(t, 3, strings.Count(out, " serving "), out)
	assert.Contains(t, out, e.nodes[0][2]+" *", "the node that answered is marked")
	assert.Regexp(t, `(?m)^\* the node that answered; ring fingerprint [0-9a-f]+; heartbeat every 100ms`, out)
	code, out, errOut = ctl("-o", "json", "nodes")
	require.Equal(t, 0, code, errOut)
	var nodes struct {
		Members []struct {
			Epoch int64             `json:"epoch"`
			Owned struct{ VMs int } `json:"owned"`
		} `json:"members"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &nodes), out)
	require.Len(t, nodes.Members, 3)
	vmsOwned := 0
	for _, m := range nodes.Members {
		assert.Positive(t, m.Epoch)
		vmsOwned += m.Owned.VMs
	}
	assert.Equal(t, 3, vmsOwned, "every VM has one owner")
	code, out, errOut = ctl("owner", vms[0])
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, vms[0]+" is owned by ")
	assert.Contains(t, out, "; every node agrees")
	code, out, errOut = ctl("-o", "yaml", "owner", vms[0])
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "agree: true\n")
	assert.Regexp(t, `members: 3\n`, out, "numbers, not strings")

	// A migration: ctl waits for its job's end; the job reads the same
	// from another node's API; a refused one exits 1 with the job's code.
	code, out, errOut = ctl("-o", "json", "host", "add", "-name", "h2")
	require.Equal(t, 0, code, errOut)
	var h2 map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &h2), out)
	code, out, errOut = ctl("-o", "json", "vm", "migrate", vms[1], h2["uuid"].(string))
	require.Equal(t, 0, code, errOut)
	var job map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &job), out)
	assert.Equal(t, "succeeded", job["state"], out)
	assert.Equal(t, "moved", job["step"], out)
	code, out, errOut = runCmd(t, &env{vars: map[string]string{"REFNODE_API": "http://" + e.nodes[1][3]}}, "ctl", "jobs", "get", "-wait", "1s", job["uuid"].(string))
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `^UUID +KIND +RESOURCE +STATE +STEP +CODE +NODE +UPDATED\n[0-9a-f]{32} +vm\.migrate +`+vms[1]+` +succeeded +moved +- +[0-9a-f]{32} +\S+\n$`, out)
	code, out, errOut = ctl("vm", "get", "-o", "json", vms[1])
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"host_uuid": "`+h2["uuid"].(string)+`"`)
	code, _, errOut = ctl("vm", "migrate", vms[1], message.NewUUID())
	assert.Equal(t, 1, code, "refused: %s", errOut)
	assert.Regexp(t, `^refnode ctl vm migrate: job [0-9a-f]{32} failed: not_found: `, errOut)
	code, out, errOut = ctl("jobs")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, 3, len(strings.Split(strings.TrimSpace(out), "\n")), "the header and two jobs: %s", out)
	code, out, errOut = ctl("-o", "json", "jobs", "list", "-state", "failed")
	require.Equal(t, 0, code, errOut)
	var failedJobs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &failedJobs), out)
	require.Len(t, failedJobs, 1)
	assert.Equal(t, "not_found", failedJobs[0]["code"])
	code, _, errOut = ctl("vm", "migrate", vms[1])
	assert.Equal(t, 2, code, "usage: %s", errOut)

	// The broker-driven flat commands still parse as before.
	code, _, errOut = ctl("get-vm", vms[0])
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "-bus (or REFNODE_BUS) is required")
}
