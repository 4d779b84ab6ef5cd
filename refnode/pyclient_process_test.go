package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// python is the interpreter the Python client runs on: Debian's, which
// has python3-pika (a python3 first on PATH may be another one).
const python = "/usr/bin/python3"

// pySummary is the JSON summary examples/python/client.py prints last
// with --json.
type pySummary struct {
	Prefix     string `json:"prefix"`
	ReplyQueue string `json:"reply_queue"`
	Clock      *struct {
		Node    string `json:"node"`
		BoundNS int64  `json:"bound_ns"`
	} `json:"clock"`
	Host   pyHandled `json:"host"`
	Image  pyHandled `json:"image"`
	Create struct {
		Node        string `json:"node"`
		Portal      string `json:"portal"`
		AllocatedBy string `json:"allocated_by"`
		HostUUID    string `json:"host_uuid"`
		State       string `json:"state"`
	} `json:"create"`
	Start struct {
		Node  string `json:"node"`
		State string `json:"state"`
	} `json:"start"`
	VM struct {
		cloud.VM
		Node string `json:"node"`
	} `json:"vm"`
	Error struct {
		UUID        string `json:"uuid"`
		Code        string `json:"code"`
		Description string `json:"description"`
		Details     string `json:"details"`
		Retry       string `json:"retry"`
	} `json:"error"`
}

// pyHandled is a resource the Python client added, and who handled it.
type pyHandled struct {
	UUID   string `json:"uuid"`
	Node   string `json:"node"`
	Portal string `json:"portal"`
}

// TestPythonClient runs examples/python/client.py, a client that speaks
// the wire protocol with pika alone, against three `refnode serve`
// processes, and checks what it reports against the cluster: every
// message about a resource ran on the resource's ring owner, the VM it
// created and started is running when the Go client reads it back, and
// its GetVm of an unknown VM failed with not_found, retry class never.
func TestPythonClient(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "starts refnode processes and a Python client", Timeout: 45 * time.Second})
	requirePika(t)
	testStart := time.Now()
	pc := newProcCluster(t, ctx, broker, onSQLite, "py")
	prefix := pc.prefix
	_, ids, r := pc.startSQLite(t, ctx, []string{"A", "B", "C"}, []string{"REFNODE_BUS=" + broker})
	t.Logf("3 nodes healthy, rings agreeing, %s after the test began", time.Since(testStart).Round(time.Millisecond))

	// The client, as examples/python/README.md runs it; the broker URL by
	// its variable.
	pyStart := time.Now()
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	cmd := exec.CommandContext(pctx, python, filepath.Join("..", "examples", "python", "client.py"),
		"--prefix", prefix, "--timeout", "10", "--json")
	cmd.Env = childEnv("CLOUDBUS_AMQP_URL=" + broker)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	took := time.Since(pyStart).Round(time.Millisecond)
	require.NoError(t, err, "client.py exits 0 (after %s); stdout:\n%s\nstderr:\n%s", took, out, stderr.String())
	t.Logf("client.py exited 0 in %s:\n%s", took, out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var s pySummary
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &s), "the last line is the JSON summary")

	// What the client reports, against the ring the test computed.
	assert.Equal(t, prefix, s.Prefix)
	assert.True(t, strings.HasPrefix(s.ReplyQueue, prefix+".reply.py-"), "reply queue %s", s.ReplyQueue)
	if assert.NotNil(t, s.Clock, "the client measured the cluster time") {
		assert.Contains(t, ids, s.Clock.Node)
		assert.Less(t, s.Clock.BoundNS, int64(time.Second), "the clock's error bound")
	}
	assert.Equal(t, mustOwner(t, r, s.Host.UUID), s.Host.Node, "AddHost ran on the host's owner")
	assert.Equal(t, mustOwner(t, r, s.Image.UUID), s.Image.Node, "AddImage ran on the image's owner")
	for _, h := range []pyHandled{s.Host, s.Image} {
		assert.Contains(t, ids, h.Portal, "a node's api.portal forwarded the message")
	}
	assert.Equal(t, s.Create.Portal, s.Create.Node, "CreateVm ran on the portal's node")
	assert.Equal(t, s.Create.Node, s.Create.AllocatedBy, "the creating node allocated the host")
	assert.Equal(t, s.Host.UUID, s.Create.HostUUID, "the VM is on the client's host, the only one")
	assert.Equal(t, string(cloud.VMCreated), s.Create.State)
	assert.Equal(t, mustOwner(t, r, s.VM.UUID), s.Start.Node, "StartVm ran on the VM's owner")
	assert.Equal(t, string(cloud.VMRunning), s.Start.State)
	assert.Equal(t, mustOwner(t, r, s.VM.UUID), s.VM.Node, "GetVm ran on the VM's owner")
	assert.Equal(t, "not_found", s.Error.Code, "GetVm of an unknown VM")
	assert.Equal(t, "never", s.Error.Retry, "not_found's retry class")
	assert.Contains(t, s.Error.Description+" "+s.Error.Details, s.Error.UUID, "the error names the unknown VM")

	// The cluster's own view, through the Go client.
	cl := newClient(t, ctx, broker, prefix)
	vm, err := callBriefly[api.VmReply](ctx, cl, api.GetVm{UUID: s.VM.UUID})
	require.NoError(t, err, "the Go client reads the Python client's VM")
	assert.Equal(t, cloud.VMRunning, vm.VM.State)
	assert.Equal(t, s.VM.VM, vm.VM, "both clients read the same record")
	assert.Equal(t, mustOwner(t, r, s.VM.UUID), vm.Node, "the VM's owner answers")
	host, err := callBriefly[api.HostReply](ctx, cl, api.GetHost{UUID: s.Host.UUID})
	require.NoError(t, err, "the Go client reads the Python client's host")
	assert.Equal(t, cloud.HostConnected, host.Host.Status)
	assert.Equal(t, s.Host.Node, host.Host.ManagedBy, "the host's owner manages it")
	img, err := callBriefly[api.ImageReply](ctx, cl, api.GetImage{UUID: s.Image.UUID})
	require.NoError(t, err, "the Go client reads the Python client's image")
	assert.Equal(t, "py-image", img.Image.Name)
	t.Logf("the Go client reads back the VM (running, on owner %s), host and image; whole test %s",
		vm.Node, time.Since(testStart).Round(time.Millisecond))
}

// requirePika skips the test unless Debian's python3 with pika is
// installed, or fails it under CI=true, where .ci/run installs it.
func requirePika(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := os.Stat(python); err != nil {
		why = python + " is missing"
	} else if out, err := exec.Command(python, "-c", "import pika").CombinedOutput(); err != nil {
		why = python + " cannot import pika: " + strings.TrimSpace(string(out))
	}
	if why == "" {
		return
	}
	const fix = "install it with: apt-get install -y python3-pika"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI=true requires this test; %s", why, fix)
	}
	t.Skipf("%s; %s", why, fix)
}
