package rest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/routers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/rest"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// flakyStore is the cluster's record store, failing every call with a
// database error while down is set.
type flakyStore struct {
	cloud.Store
	down atomic.Bool
}

var errDBDown = message.ErrUnavailable.WithDetails("the database does not answer (test)")

func (s *flakyStore) VMs(ctx context.Context) ([]cloud.VM, error) {
	if s.down.Load() {
		return nil, errDBDown
	}
	return s.Store.VMs(ctx)
}

func (s *flakyStore) VM(ctx context.Context, id string) (cloud.VM, error) {
	if s.down.Load() {
		return cloud.VM{}, errDBDown
	}
	return s.Store.VM(ctx, id)
}

// fixture is a cluster of refnode's services on the in-memory bus with
// the REST API served through a client of it.
type fixture struct {
	c      *servicetest.Cluster
	hv     *simhv.Hypervisor
	store  *flakyStore
	api    http.Handler
	router routers.Router // of the OpenAPI document: every request's answer is checked against it
	// badRequests is set while requests are meant to be invalid: only
	// their answers are checked against the document.
	badRequests bool
}

func start(t *testing.T, nodes int, token string) *fixture {
	t.Helper()
	reg := message.NewRegistry()
	require.NoError(t, api.Register(reg))
	hv, err := simhv.New(simhv.Config{})
	require.NoError(t, err)
	db := memdb.New()
	f := &fixture{hv: hv, store: &flakyStore{Store: db}}
	_, f.router = loadOpenAPI(t)
	f.c = servicetest.Start(t, servicetest.Options{
		Nodes:    nodes,
		Registry: reg,
		// No test here kills a node: a long eviction keeps a node that a
		// loaded machine stalled past the in-memory 300 ms in the ring
		// (TestNodesStates once saw one live node of two).
		Heartbeat: heartbeat.Config{EvictAfter: 30 * time.Second},
		Services: func(int, nodekit.Env) []service.Service {
			s, err := services.New(services.Config{Store: f.store, Hypervisor: hv, PingInterval: time.Hour})
			if err != nil {
				panic(err)
			}
			return s.Services()
		},
	})
	db.UseFence(f.c.Store(), memfence.Config{})
	cl := f.c.Client(t)
	a, err := rest.New(rest.Config{Caller: cl, Store: f.store, Token: token, Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Node: f.c.Node(0), DeadLetters: f.c.Node(0)})
	require.NoError(t, err)
	f.api = a
	return f
}

// response is what a request got.
type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (r response) errField(k string) string {
	e, _ := r.body["error"].(map[string]any)
	s, _ := e[k].(string)
	return s
}

func (r response) str(k string) string {
	s, _ := r.body[k].(string)
	return s
}

func (f *fixture) do(t *testing.T, method, path, body string, header ...string) response {
	t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	} else {
		rd = strings.NewReader("")
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	f.api.ServeHTTP(rec, req)
	out := response{status: rec.Code, header: rec.Header(), raw: rec.Body.String()}
	validate(t, f.router, req, body, !f.badRequests, rec.Code, rec.Header(), rec.Body.Bytes())
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"), "%s %s: %s", method, path, out.raw)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out.body), "%s %s: %s", method, path, out.raw)
	return out
}

// TestVMLifecycle creates, starts, stops and destroys VMs through the
// API of a 3-node cluster: every message about a VM ran on its ring
// owner, through a portal, and the lists page through the database.
func TestVMLifecycle(t *testing.T) {
	f := start(t, 3, "")
	host := f.do(t, "POST", "/v1/hosts", `{"name":"h1","address":"10.0.0.1"}`)
	require.Equal(t, http.StatusCreated, host.status, host.raw)
	hostID := host.str("uuid")
	assert.Equal(t, "/v1/hosts/"+hostID, host.header.Get("Location"))
	assert.Equal(t, f.c.Owner(hostID), host.header.Get(rest.HeaderNode), "the host's owner added it")
	assert.NotEmpty(t, host.header.Get(rest.HeaderPortal), "through a portal")
	img := f.do(t, "POST", "/v1/images", `{"name":"debian","size_mb":512}`)
	require.Equal(t, http.StatusCreated, img.status, img.raw)
	imgID := img.str("uuid")

	const n = 20
	var vms []string
	for i := range n {
		created := f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"name":"vm%d","image_uuid":%q,"cpus":2}`, i, imgID))
		require.Equal(t, http.StatusCreated, created.status, created.raw)
		id := created.str("uuid")
		assert.Equal(t, "created", created.str("state"))
		assert.Equal(t, hostID, created.str("host_uuid"))
		assert.Equal(t, created.header.Get(rest.HeaderPortal), created.header.Get(rest.HeaderNode), "a creation runs on the node whose portal took it")
		vms = append(vms, id)
	}
	for _, id := range vms {
		for _, step := range []struct{ action, state string }{{"start", "running"}, {"reboot", "running"}, {"stop", "stopped"}} {
			got := f.do(t, "POST", "/v1/vms/"+id+"/"+step.action, "")
			require.Equal(t, http.StatusOK, got.status, "%s %s: %s", step.action, id, got.raw)
			assert.Equal(t, step.state, got.str("state"))
			assert.Equal(t, f.c.Owner(id), got.header.Get(rest.HeaderNode), "%s ran on the VM's owner", step.action)
		}
	}
	got := f.do(t, "GET", "/v1/vms/"+strings.ToUpper(vms[0]), "")
	require.Equal(t, http.StatusOK, got.status, got.raw)
	assert.Equal(t, vms[0], got.str("uuid"), "a UUID in any spelling names the same VM")

	// Page through the VMs while more are created: each VM once, in
	// UUID order; the new ones may or may not appear.
	seen := map[string]bool{}
	last, cursor := "", ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 20, "paging ends")
		path := "/v1/vms?limit=7"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		p := f.do(t, "GET", path, "")
		require.Equal(t, http.StatusOK, p.status, p.raw)
		assert.Equal(t, "database", p.header.Get(rest.HeaderSource))
		assert.Equal(t, "database", p.str("source"))
		items := p.body["items"].([]any)
		assert.LessOrEqual(t, len(items), 7)
		for _, it := range items {
			id := it.(map[string]any)["uuid"].(string)
			assert.False(t, seen[id], "%s listed twice", id)
			assert.Greater(t, id, last, "sorted by UUID")
			seen[id], last = true, id
		}
		created := f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, imgID))
		require.Equal(t, http.StatusCreated, created.status, created.raw)
		if cursor = p.str("next_cursor"); cursor == "" {
			break
		}
	}
	for _, id := range vms {
		assert.True(t, seen[id], "VM %s listed", id)
	}
	stopped := f.do(t, "GET", "/v1/vms?state=stopped&limit=1000", "")
	require.Equal(t, http.StatusOK, stopped.status, stopped.raw)
	assert.Len(t, stopped.body["items"], n, "the stopped VMs")

	for _, id := range vms {
		got := f.do(t, "POST", "/v1/vms/"+id+"/destroy", "{}")
		require.Equal(t, http.StatusOK, got.status, got.raw)
		assert.Equal(t, "destroyed", got.str("state"))
	}
	renamed := f.do(t, "PATCH", "/v1/images/"+imgID, `{"name":"trixie","if_name":"debian"}`)
	require.Equal(t, http.StatusOK, renamed.status, renamed.raw)
	assert.Equal(t, "trixie", renamed.str("name"))
	again := f.do(t, "PATCH", "/v1/images/"+imgID, `{"name":"bookworm","if_name":"debian"}`)
	require.Equal(t, http.StatusConflict, again.status, again.raw)
	assert.Equal(t, "failed_precondition", again.errField("code"))
	hosts := f.do(t, "GET", "/v1/hosts?status=connected", "")
	require.Equal(t, http.StatusOK, hosts.status, hosts.raw)
	assert.Len(t, hosts.body["items"], 1)
	re := f.do(t, "POST", "/v1/hosts/"+hostID+"/reconnect", "")
	require.Equal(t, http.StatusOK, re.status, re.raw)
	assert.Equal(t, "connected", re.str("status"))
}

// TestIdempotencyKey: a request repeated with its Idempotency-Key runs
// once and gets the first answer; the key used for another request is
// refused.
func TestIdempotencyKey(t *testing.T) {
	f := start(t, 2, "")
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/hosts", `{}`).status)
	img := f.do(t, "POST", "/v1/images", `{"name":"i"}`).str("uuid")
	body := fmt.Sprintf(`{"image_uuid":%q}`, img)
	first := f.do(t, "POST", "/v1/vms", body, "Idempotency-Key", "create-1")
	require.Equal(t, http.StatusCreated, first.status, first.raw)
	again := f.do(t, "POST", "/v1/vms", body, "Idempotency-Key", "create-1")
	require.Equal(t, http.StatusCreated, again.status, again.raw)
	assert.Equal(t, first.str("uuid"), again.str("uuid"), "the same VM: created once")
	all := f.do(t, "GET", "/v1/vms", "")
	assert.Len(t, all.body["items"], 1, "one VM")

	other := f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q,"name":"other"}`, img), "Idempotency-Key", "create-1")
	assert.Equal(t, http.StatusUnprocessableEntity, other.status, other.raw)
	assert.Equal(t, "idempotency_key_reused", other.errField("code"))

	vm := first.str("uuid")
	start1 := f.do(t, "POST", "/v1/vms/"+vm+"/start", "", "Idempotency-Key", "start-1")
	require.Equal(t, http.StatusOK, start1.status, start1.raw)
	require.Equal(t, http.StatusOK, f.do(t, "POST", "/v1/vms/"+vm+"/stop", "").status)
	start2 := f.do(t, "POST", "/v1/vms/"+vm+"/start", "", "Idempotency-Key", "start-1")
	require.Equal(t, http.StatusOK, start2.status, start2.raw)
	assert.Equal(t, "running", start2.str("state"), "the first answer")
	now := f.do(t, "GET", "/v1/vms/"+vm, "")
	assert.Equal(t, "stopped", now.str("state"), "and the start did not run again")
}

// TestBadRequests: every request a client gets wrong is answered with
// its documented status and code, naming the field where there is one;
// none with a 500.
func TestBadRequests(t *testing.T) {
	f := start(t, 2, "s3cret")
	auth := []string{"Authorization", "Bearer s3cret"}
	host := f.do(t, "POST", "/v1/hosts", `{}`, auth...)
	require.Equal(t, http.StatusCreated, host.status, host.raw)
	img := f.do(t, "POST", "/v1/images", `{}`, auth...).str("uuid")
	vm := f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img), auth...)
	require.Equal(t, http.StatusCreated, vm.status, vm.raw)
	running := vm.str("uuid")
	require.Equal(t, http.StatusOK, f.do(t, "POST", "/v1/vms/"+running+"/start", "", auth...).status)
	created := f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img), auth...)
	require.Equal(t, http.StatusCreated, created.status, created.raw)

	f.badRequests = true
	for _, c := range []struct {
		name, method, path, body string
		header                   []string // replaces the token's header if set
		status                   int
		code, field              string
	}{
		{"malformed JSON", "POST", "/v1/vms", `{"image_uuid":`, nil, 400, "bad_request", ""},
		{"not JSON at all", "POST", "/v1/hosts", `name=x`, nil, 400, "bad_request", ""},
		{"unknown field", "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q,"colour":"red"}`, img), nil, 400, "bad_request", "colour"},
		{"wrong type", "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q,"cpus":"two"}`, img), nil, 400, "bad_request", "cpus"},
		{"an array, not an object", "POST", "/v1/hosts", `[1,2]`, nil, 400, "bad_request", ""},
		{"two objects", "POST", "/v1/hosts", `{}{}`, nil, 400, "bad_request", ""},
		{"empty body", "POST", "/v1/images", ``, nil, 400, "bad_request", ""},
		{"out of range", "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q,"cpus":1000}`, img), nil, 400, "bad_request", "cpus"},
		{"name too long", "POST", "/v1/hosts", fmt.Sprintf(`{"name":%q}`, strings.Repeat("n", 300)), nil, 400, "bad_request", "name"},
		{"missing image", "POST", "/v1/vms", `{}`, nil, 400, "bad_request", "image_uuid"},
		{"malformed UUID in the body", "POST", "/v1/vms", `{"image_uuid":"nope"}`, nil, 400, "invalid_uuid", "image_uuid"},
		{"malformed UUID in the path", "GET", "/v1/vms/nope", ``, nil, 400, "invalid_uuid", "uuid"},
		{"oversize body", "POST", "/v1/hosts", fmt.Sprintf(`{"name":%q}`, strings.Repeat("n", 70<<10)), nil, 413, "too_large", ""},
		{"not JSON content type", "POST", "/v1/hosts", `{}`, []string{"Authorization", "Bearer s3cret", "Content-Type", "text/plain"}, 415, "not_json", ""},
		{"no token", "GET", "/v1/vms", ``, []string{"X-Other", "1"}, 401, "unauthorized", ""},
		{"wrong token", "GET", "/v1/vms", ``, []string{"Authorization", "Bearer s3cre"}, 401, "unauthorized", ""},
		{"token in another scheme", "GET", "/v1/vms", ``, []string{"Authorization", "Basic s3cret"}, 401, "unauthorized", ""},
		{"unknown VM", "GET", "/v1/vms/" + message.NewUUID(), ``, nil, 404, "not_found", ""},
		{"unknown VM's start", "POST", "/v1/vms/" + message.NewUUID() + "/start", ``, nil, 404, "not_found", ""},
		{"unknown image for a VM", "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, message.NewUUID()), nil, 404, "not_found", ""},
		{"unknown action", "POST", "/v1/vms/" + running + "/explode", ``, nil, 404, "not_found", "action"},
		{"unknown route", "GET", "/v2/vms", ``, nil, 404, "not_found", ""},
		{"reboot a VM never started", "POST", "/v1/vms/" + created.str("uuid") + "/reboot", ``, nil, 409, "conflict", ""},
		{"a host UUID taken", "POST", "/v1/hosts", fmt.Sprintf(`{"uuid":%q}`, host.str("uuid")), nil, 409, "already_exists", ""},
		{"rename without a name", "PATCH", "/v1/images/" + img, `{}`, nil, 400, "bad_request", "name"},
		{"bad limit", "GET", "/v1/vms?limit=0", ``, nil, 400, "bad_request", "limit"},
		{"bad cursor", "GET", "/v1/vms?cursor=x", ``, nil, 400, "bad_request", "cursor"},
		{"bad state", "GET", "/v1/vms?state=flying", ``, nil, 400, "bad_request", "state"},
		{"bad idempotency key", "POST", "/v1/vms/" + running + "/stop", ``, []string{"Authorization", "Bearer s3cret", "Idempotency-Key", "has space"}, 400, "bad_request", "Idempotency-Key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := c.header
			if h == nil {
				h = auth
			}
			got := f.do(t, c.method, c.path, c.body, h...)
			assert.Equal(t, c.status, got.status, got.raw)
			assert.Equal(t, c.code, got.errField("code"), got.raw)
			assert.Equal(t, c.field, got.errField("field"), got.raw)
			assert.NotEmpty(t, got.errField("message"))
			assert.NotEmpty(t, got.errField("retry"))
			assert.NotContains(t, got.raw, "s3cret", "the token is never echoed")
		})
	}

	t.Run("database down", func(t *testing.T) {
		f.store.down.Store(true)
		defer f.store.down.Store(false)
		for _, path := range []string{"/v1/vms", "/v1/vms/" + running} {
			got := f.do(t, "GET", path, ``, auth...)
			assert.Equal(t, http.StatusServiceUnavailable, got.status, got.raw)
			assert.Equal(t, "unavailable", got.errField("code"), got.raw)
			assert.Equal(t, "1", got.header.Get("Retry-After"))
		}
	})
}

// TestNew: a Config without a caller or a store is refused, naming what
// is missing.
func TestNew(t *testing.T) {
	_, err := rest.New(rest.Config{Store: memdb.New()})
	assert.ErrorContains(t, err, "Config.Caller")
	_, err = rest.New(rest.Config{Caller: &service.Client{}})
	assert.ErrorContains(t, err, "Config.Store")
	_, err = rest.New(rest.Config{Caller: &service.Client{}, Store: memdb.New(), Timeout: -1})
	assert.ErrorContains(t, err, "negative")
}

// TestMigrateJobs: a migration answers its job, which the VM's owner
// runs to its end and any reader of the database sees; ?wait= waits for
// it; a refused migration's job says why; an Idempotency-Key makes a
// repeated request the same job; jobs list by state and resource.
func TestMigrateJobs(t *testing.T) {
	f := start(t, 3, "")
	var hosts []string
	for range 2 {
		h := f.do(t, "POST", "/v1/hosts", `{}`)
		require.Equal(t, http.StatusCreated, h.status, h.raw)
		hosts = append(hosts, h.str("uuid"))
	}
	img := f.do(t, "POST", "/v1/images", `{}`).str("uuid")
	vm := f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img))
	require.Equal(t, http.StatusCreated, vm.status, vm.raw)
	id, source := vm.str("uuid"), vm.str("host_uuid")
	target := hosts[0]
	if target == source {
		target = hosts[1]
	}
	require.Equal(t, http.StatusOK, f.do(t, "POST", "/v1/vms/"+id+"/start", "").status)

	body := fmt.Sprintf(`{"host_uuid":%q}`, target)
	got := f.do(t, "POST", "/v1/vms/"+id+"/migrate", body, "Idempotency-Key", "move-1")
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, got.status, got.raw)
	job := got.str("uuid")
	assert.Equal(t, "/v1/jobs/"+job, got.header.Get("Location"))
	assert.Equal(t, "vm.migrate", got.str("kind"))
	assert.Equal(t, id, got.str("resource"))
	done := f.do(t, "GET", "/v1/jobs/"+job+"?wait=5s", "")
	require.Equal(t, http.StatusOK, done.status, done.raw)
	assert.Equal(t, "succeeded", done.str("state"), done.raw)
	assert.Equal(t, "moved", done.str("step"))
	assert.Equal(t, f.c.Owner(id), done.str("node"), "the VM's owner recorded the last step")
	assert.Equal(t, "database", done.header.Get(rest.HeaderSource))
	now := f.do(t, "GET", "/v1/vms/"+id, "")
	assert.Equal(t, target, now.str("host_uuid"))
	assert.Equal(t, "running", now.str("state"))

	again := f.do(t, "POST", "/v1/vms/"+id+"/migrate?wait=5s", body, "Idempotency-Key", "move-1")
	require.Equal(t, http.StatusOK, again.status, again.raw)
	assert.Equal(t, job, again.str("uuid"), "the same job: run once")
	assert.Equal(t, "succeeded", again.str("state"))
	other := f.do(t, "POST", "/v1/vms/"+id+"/migrate", fmt.Sprintf(`{"host_uuid":%q}`, source), "Idempotency-Key", "move-1")
	assert.Equal(t, http.StatusUnprocessableEntity, other.status, other.raw)
	assert.Equal(t, "idempotency_key_reused", other.errField("code"))

	refused := f.do(t, "POST", "/v1/vms/"+id+"/migrate?wait=5s", fmt.Sprintf(`{"host_uuid":%q}`, message.NewUUID()))
	require.Equal(t, http.StatusOK, refused.status, refused.raw)
	assert.Equal(t, "failed", refused.str("state"))
	assert.Equal(t, "not_found", refused.str("code"))
	assert.NotEmpty(t, refused.str("error"))

	failed := f.do(t, "GET", "/v1/jobs?state=failed", "")
	require.Equal(t, http.StatusOK, failed.status, failed.raw)
	require.Len(t, failed.body["items"], 1)
	assert.Equal(t, refused.str("uuid"), failed.body["items"].([]any)[0].(map[string]any)["uuid"])
	mine := f.do(t, "GET", "/v1/jobs?resource="+id, "")
	assert.Len(t, mine.body["items"], 2)
	none := f.do(t, "GET", "/v1/jobs?resource="+message.NewUUID(), "")
	assert.Empty(t, none.body["items"])

	f.badRequests = true
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, field              string
	}{
		{"no target", "POST", "/v1/vms/" + id + "/migrate", `{}`, 400, "bad_request", "host_uuid"},
		{"malformed target", "POST", "/v1/vms/" + id + "/migrate", `{"host_uuid":"x"}`, 400, "invalid_uuid", "host_uuid"},
		{"unknown field", "POST", "/v1/vms/" + id + "/migrate", fmt.Sprintf(`{"host_uuid":%q,"live":true}`, target), 400, "bad_request", "live"},
		{"bad wait", "POST", "/v1/vms/" + id + "/migrate?wait=forever", body, 400, "bad_request", "wait"},
		{"wait over the timeout", "GET", "/v1/jobs/" + job + "?wait=1h", ``, 400, "bad_request", "wait"},
		{"unknown job", "GET", "/v1/jobs/" + message.NewUUID(), ``, 404, "not_found", ""},
		{"bad job state", "GET", "/v1/jobs?state=done", ``, 400, "bad_request", "state"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := f.do(t, c.method, c.path, c.body)
			assert.Equal(t, c.status, got.status, got.raw)
			assert.Equal(t, c.code, got.errField("code"), got.raw)
			assert.Equal(t, c.field, got.errField("field"), got.raw)
		})
	}
}

// TestServerFailureSaysWhy: a 500 (the hypervisor failed) gives the
// handler's reason, not only where the call went.
func TestServerFailureSaysWhy(t *testing.T) {
	f := start(t, 2, "")
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/hosts", `{}`).status)
	img := f.do(t, "POST", "/v1/images", `{}`).str("uuid")
	vm := f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img))
	require.Equal(t, http.StatusCreated, vm.status, vm.raw)
	f.hv.FailNext(simhv.OpStartVM, 1)
	got := f.do(t, "POST", "/v1/vms/"+vm.str("uuid")+"/start", "")
	assert.Equal(t, http.StatusInternalServerError, got.status, got.raw)
	assert.Equal(t, "internal", got.errField("code"), got.raw)
	assert.Contains(t, got.errField("message"), "simhv: injected failure", got.raw)
	assert.Contains(t, got.errField("message"), "the VM stays created", got.raw)
	t.Logf("%s", got.raw)
}
