package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// migrateLatency is how long each hypervisor move takes in
// TestRESTOnRabbitMQAndPostgres: long enough to kill a node mid-move.
const migrateLatency = time.Second

// procAPILine is the REST API's line of refnode serve's stdout.
var procAPILine = regexp.MustCompile(`(?m)^api: +http://(\S+)/v1/`)

// TestRESTOnRabbitMQAndPostgres drives the REST API of three refnode
// serve processes on RabbitMQ and PostgreSQL, behind a token: 100 VMs
// created, started, stopped and destroyed, each through another node's
// API than the step before; every answer about a VM names its ring owner
// as the node that handled it, and a creation the node whose portal took
// it; lists page through the database while VMs are created, each VM
// once; every VM migrated to the other host as a job accepted by one
// node and polled through another, while node C is SIGKILLed mid-move:
// every job ends with a known outcome, its last step on the VM's owner,
// and every VM is on the host its job says.
func TestRESTOnRabbitMQAndPostgres(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the REST test runs 3 processes for about 30 seconds", FullSpeed: true, Timeout: 4 * time.Minute})
	pc := newProcCluster(t, ctx, broker, onPostgres, "rest")
	env := childEnv("REFNODE_BUS="+broker, "REFNODE_API_TOKEN=rest-t0ken")
	var nodes []*child
	for _, label := range []string{"A", "B", "C"} {
		nodes = append(nodes, pc.serve(t, label, []string{"-db", pc.db, "-heartbeat", procHeartbeat.String(), "-evict-after", procEvictAfter.String(), "-api-listen", "127.0.0.1:0", "-test-migrate-latency", migrateLatency.String()}, env))
	}
	_, r := awaitAgreed(t, ctx, nodes)
	apis := make([]string, len(nodes))
	for i, c := range nodes {
		out, _ := c.output()
		m := procAPILine.FindStringSubmatch(out)
		require.NotNil(t, m, "node %s printed its API address: %s", c.label, out)
		apis[i] = "http://" + m[1]
	}
	client := &http.Client{Timeout: 20 * time.Second}
	call := func(node int, method, path, body string) (int, http.Header, map[string]any, error) {
		req, err := http.NewRequestWithContext(ctx, method, apis[node]+path, strings.NewReader(body))
		if err != nil {
			return 0, nil, nil, err
		}
		req.Header.Set("Authorization", "Bearer rest-t0ken")
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, nil, nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return 0, nil, nil, fmt.Errorf("%s %s: %w: %s", method, path, err, data)
		}
		return resp.StatusCode, resp.Header, m, nil
	}
	do := func(node int, method, path, body string) (int, http.Header, map[string]any) {
		t.Helper()
		code, h, m, err := call(node, method, path, body)
		require.NoError(t, err)
		return code, h, m
	}
	for range 2 {
		code, _, h := do(0, "POST", "/v1/hosts", `{}`)
		require.Equal(t, http.StatusCreated, code, "%v", h)
	}
	code, _, img := do(1, "POST", "/v1/images", `{"name":"debian"}`)
	require.Equal(t, http.StatusCreated, code, "%v", img)

	// Page through the VMs while they are created: each listed once.
	const n = 100
	stopPaging := make(chan struct{})
	var (
		paging     sync.WaitGroup
		passes     int
		pagingErrs []string
	)
	paging.Go(func() {
		for {
			seen, cursor := map[string]bool{}, ""
			for {
				path := "/v1/vms?limit=13"
				if cursor != "" {
					path += "&cursor=" + cursor
				}
				code, h, page, err := call(2, "GET", path, "")
				if err != nil || code != http.StatusOK || h.Get("Refnode-Source") != "database" {
					pagingErrs = append(pagingErrs, fmt.Sprintf("%s: %d %v %v", path, code, page, err))
					return
				}
				for _, it := range page["items"].([]any) {
					id := it.(map[string]any)["uuid"].(string)
					if seen[id] {
						pagingErrs = append(pagingErrs, "listed twice: "+id)
					}
					seen[id] = true
				}
				if cursor, _ = page["next_cursor"].(string); cursor == "" {
					break
				}
			}
			passes++
			select {
			case <-stopPaging:
				return
			default:
			}
		}
	})
	start := time.Now()
	vms := make([]string, n)
	for i := range n {
		code, h, vm := do(i%3, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q,"name":"vm%d"}`, img["uuid"], i))
		require.Equal(t, http.StatusCreated, code, "%v", vm)
		require.Equal(t, h.Get("Refnode-Portal"), h.Get("Refnode-Node"), "a creation runs on the node whose portal took it")
		vms[i] = vm["uuid"].(string)
	}
	close(stopPaging)
	paging.Wait()
	assert.Empty(t, pagingErrs)
	assert.Positive(t, passes)
	calls := n
	for step, action := range []string{"start", "stop"} {
		for i, id := range vms {
			code, h, vm := do((i+step+1)%3, "POST", "/v1/vms/"+id+"/"+action, "")
			require.Equal(t, http.StatusOK, code, "%s %s: %v", action, id, vm)
			owner, err := r.Locate(id)
			require.NoError(t, err)
			assert.Equal(t, owner, h.Get("Refnode-Node"), "%s of %s ran on its ring owner", action, id)
			calls++
		}
	}
	took := time.Since(start)

	// Migrate every VM to the other host, each job accepted by one node
	// and polled through another; node C is SIGKILLed while the moves
	// run (each takes migrateLatency on the hypervisor). Every job ends
	// with a known outcome, by the VM's owner of the moment, and every
	// VM is on the host its job says (read from the database).
	code, _, hostPage := do(0, "GET", "/v1/hosts", "")
	require.Equal(t, http.StatusOK, code)
	hostIDs := []string{}
	for _, it := range hostPage["items"].([]any) {
		hostIDs = append(hostIDs, it.(map[string]any)["uuid"].(string))
	}
	require.Len(t, hostIDs, 2)
	code, _, vmPage := do(0, "GET", "/v1/vms?limit=1000", "")
	require.Equal(t, http.StatusOK, code)
	source := map[string]string{}
	for _, it := range vmPage["items"].([]any) {
		v := it.(map[string]any)
		source[v["uuid"].(string)] = v["host_uuid"].(string)
	}
	jobs := make([]string, n)
	target := make([]string, n)
	migrateStart := time.Now()
	for i, id := range vms {
		target[i] = hostIDs[0]
		if source[id] == target[i] {
			target[i] = hostIDs[1]
		}
		code, _, job := do(i%2, "POST", "/v1/vms/"+id+"/migrate", fmt.Sprintf(`{"host_uuid":%q}`, target[i]))
		require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, code, "migrate %s: %v", id, job)
		jobs[i] = job["uuid"].(string)
	}
	require.NoError(t, poll(ctx, func() error { // some moves under way on C's VMs
		for i, id := range vms {
			if owner, _ := r.Locate(id); owner != nodes[2].id {
				continue
			}
			if code, _, job := do(i%2, "GET", "/v1/jobs/"+jobs[i], ""); code == http.StatusOK && job["step"] == "target-ready" {
				return nil
			}
		}
		return errors.New("no job of a VM of node C is at its hypervisor move yet")
	}))
	killedAt := time.Now()
	require.NoError(t, nodes[2].signal(syscall.SIGKILL, 10*time.Second), "node C killed mid-migration")
	survivors := nodes[:2]
	_, r2 := awaitAgreed(t, ctx, survivors)
	outcomes, resumed := map[string]int{}, 0
	for i, id := range vms {
		var job map[string]any
		require.NoError(t, poll(ctx, func() error {
			code, _, j := do((i+1)%2, "GET", "/v1/jobs/"+jobs[i]+"?wait=5s", "")
			if code != http.StatusOK {
				return fmt.Errorf("job %s: %d %v", jobs[i], code, j)
			}
			if s := j["state"]; s != "succeeded" && s != "failed" {
				return fmt.Errorf("job %s of vm %s is %v at step %v", jobs[i], id, s, j["step"])
			}
			job = j
			return nil
		}), "the job of vm %s ends", id)
		outcomes[job["state"].(string)+" "+fmt.Sprint(job["code"])]++
		before, err := r.Locate(id)
		require.NoError(t, err)
		after, err := r2.Locate(id)
		require.NoError(t, err)
		// C's VMs: C, if it ended the job before it died, or their new owner.
		assert.Contains(t, []string{before, after}, job["node"], "the last step of job %s ran on vm %s's owner", jobs[i], id)
		if before != after && job["node"] == after {
			resumed++
		}
	}
	endedIn := time.Since(killedAt)
	code, _, vmPage = do(1, "GET", "/v1/vms?limit=1000", "")
	require.Equal(t, http.StatusOK, code)
	onHost := map[string]string{}
	for _, it := range vmPage["items"].([]any) {
		v := it.(map[string]any)
		onHost[v["uuid"].(string)] = v["host_uuid"].(string)
	}
	for i, id := range vms {
		_, _, job := do(0, "GET", "/v1/jobs/"+jobs[i], "")
		want := source[id]
		if job["state"] == "succeeded" {
			want = target[i]
		}
		assert.Equal(t, want, onHost[id], "vm %s is on the host its job (%v) says", id, job["state"])
	}
	assert.Positive(t, resumed, "a job of node C's VMs was ended by their new owner")
	t.Logf("%d migrations (each %s on the hypervisor) through 2 nodes' APIs, node C SIGKILLed %s after the first was sent: every job ended %s after the kill, %d of them by the new owner of a VM of C; outcomes %v",
		n, migrateLatency, killedAt.Sub(migrateStart).Round(time.Millisecond), endedIn.Round(time.Millisecond), resumed, outcomes)

	for i, id := range vms {
		code, h, vm := do(i%2, "POST", "/v1/vms/"+id+"/destroy", "")
		require.Equal(t, http.StatusOK, code, "destroy %s: %v", id, vm)
		owner, err := r2.Locate(id)
		require.NoError(t, err)
		assert.Equal(t, owner, h.Get("Refnode-Node"), "destroy of %s ran on its ring owner", id)
	}
	code, _, destroyed := do(0, "GET", "/v1/vms?state=destroyed&limit=1000", "")
	require.Equal(t, http.StatusOK, code)
	assert.Len(t, destroyed["items"], n)
	code, _, _ = do(1, "GET", "/v1/vms", "")
	assert.Equal(t, http.StatusOK, code)
	t.Logf("%d REST calls through 3 nodes on RabbitMQ and PostgreSQL in %s (%.1f ms each, one at a time); %d list passes of %d-VM pages while creating, no VM listed twice",
		calls, took.Round(time.Millisecond), float64(took.Milliseconds())/float64(calls), passes, 13)

	for _, c := range survivors {
		require.NoError(t, c.signal(syscall.SIGTERM, 30*time.Second), "node %s leaves", c.label)
	}
	for _, c := range nodes {
		out, errOut := c.output()
		assert.NotContains(t, out+errOut, "rest-t0ken", "node %s never prints the token", c.label)
	}
}
