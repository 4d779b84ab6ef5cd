package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/internal/wire"
)

// httpClient talks to the children's admin servers; no keep-alive, so
// no connection outlives a request (goleak).
var httpClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// child is one refnode serve process.
type child struct {
	label        string
	cmd          *exec.Cmd
	stdout       string // file
	stderr       string // file
	started      time.Time
	admin        string // http://127.0.0.1:port, from its stdout
	id           string // node UUID, from its stdout
	exited       chan struct{}
	waitErr      error
	ready, ended time.Duration // from start to healthy; to exit
}

// childEnv is the test's environment without the CLOUDBUS_* and REFNODE_*
// variables, plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CLOUDBUS_") && !strings.HasPrefix(kv, "REFNODE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// startChild starts refnode serve with args and extra environment,
// output to files in dir. Its process is waited for in a goroutine that
// ends when it exits. At the end of the test it is killed (SIGKILL) and,
// if the test failed, what it printed is logged.
func startChild(t *testing.T, dir, label string, args, env []string) *child {
	t.Helper()
	c := &child{label: label, exited: make(chan struct{}),
		stdout: filepath.Join(dir, label+".out"), stderr: filepath.Join(dir, label+".err")}
	out, err := os.Create(c.stdout)
	require.NoError(t, err)
	defer out.Close()
	errf, err := os.Create(c.stderr)
	require.NoError(t, err)
	defer errf.Close()
	c.cmd = exec.Command(refnodeBin, append([]string{"serve"}, args...)...)
	c.cmd.Env = childEnv(env...)
	c.cmd.Stdout, c.cmd.Stderr = out, errf
	c.cmd.SysProcAttr = childProcAttr() // ends with the test binary, even one killed
	c.started = time.Now()
	require.NoError(t, c.cmd.Start())
	go func() {
		c.waitErr = c.cmd.Wait()
		c.ended = time.Since(c.started)
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = c.signal(syscall.SIGKILL, 10*time.Second)
		if t.Failed() {
			out, errOut := c.output()
			t.Logf("node %s stdout:\n%s\nnode %s stderr (last 4000 bytes):\n%s", c.label, out, c.label, tail(errOut, 4000))
		}
	})
	return c
}

// wireClient speaks the wire protocol by hand, as a client in another
// language would: its own connection, a channel with publisher confirms,
// and a reply queue whose replies it collects, by correlation id, as
// their codes ("ok" for a reply without error). The connection closes
// at the end of the test, which ends the collecting goroutine.
type wireClient struct {
	ch          *amqp.Channel
	replyQueue  string
	undecodable atomic.Int64 // replies that did not decode
	mu          sync.Mutex
	codes       map[string][]string
}

// newWireClient connects to broker as name and consumes replyQueue.
func newWireClient(t *testing.T, broker, name, replyQueue string) *wireClient {
	t.Helper()
	conn, err := dialBroker(broker, name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	_, err = ch.QueueDeclare(replyQueue, false, true, true, false, nil)
	require.NoError(t, err)
	deliveries, err := ch.Consume(replyQueue, "", true, true, false, false, nil)
	require.NoError(t, err)
	c := &wireClient{ch: ch, replyQueue: replyQueue, codes: map[string][]string{}}
	go func() {
		for d := range deliveries {
			env, err := wire.DecodeEnvelope(d.Body, 0)
			if err != nil {
				c.undecodable.Add(1)
				continue
			}
			code := "ok"
			if env.Error != nil {
				code = string(env.Error.Code)
			}
			c.mu.Lock()
			c.codes[env.CorrelationID] = append(c.codes[env.CorrelationID], code)
			c.mu.Unlock()
		}
	}()
	return c
}

// replies returns the codes of the replies to corr so far.
func (c *wireClient) replies(corr string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.codes[corr])
}

// output returns what the child printed so far.
func (c *child) output() (stdout, stderr string) {
	o, _ := os.ReadFile(c.stdout)
	e, _ := os.ReadFile(c.stderr)
	return string(o), string(e)
}

var (
	adminLine = regexp.MustCompile(`(?m)^admin: +(http://\S+)`)
	nodeLine  = regexp.MustCompile(`(?m)^node: +([0-9a-f]{32})$`)
)

// awaitHealthy polls the child's stdout for its admin URL, then its
// /healthz until 200, within the deadline.
func (c *child) awaitHealthy(ctx context.Context) error {
	for {
		if c.admin == "" {
			out, _ := c.output()
			if m := adminLine.FindStringSubmatch(out); m != nil {
				c.admin = m[1]
				if n := nodeLine.FindStringSubmatch(out); n != nil {
					c.id = n[1]
				}
			}
		}
		if c.admin != "" {
			if resp, err := httpClient.Get(c.admin + "/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					c.ready = time.Since(c.started)
					return nil
				}
			}
		}
		select {
		case <-c.exited:
			return fmt.Errorf("node %s exited before it was healthy: %v", c.label, c.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("node %s not healthy: %w", c.label, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// status fetches the child's GET /status.
func (c *child) status() (nodeStatus, error) {
	var st nodeStatus
	resp, err := httpClient.Get(c.admin + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s/status: %s", c.admin, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// signal sends sig and waits for the exit, up to timeout.
func (c *child) signal(sig syscall.Signal, timeout time.Duration) error {
	if err := c.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return c.wait(sig.String(), timeout)
}

// wait waits for the child's exit, up to timeout after what. A child
// still running then gets SIGQUIT, which has the Go runtime write every
// goroutine's stack to its stderr (the node's log) and exit, so the
// failure says where it hung.
func (c *child) wait(what string, timeout time.Duration) error {
	select {
	case <-c.exited:
		return nil
	case <-time.After(timeout):
	}
	err := fmt.Errorf("node %s did not exit within %s of %s", c.label, timeout, what)
	if c.cmd.Process.Signal(syscall.SIGQUIT) == nil {
		select {
		case <-c.exited:
			err = fmt.Errorf("%w (its goroutines' stacks, from SIGQUIT, end its stderr)", err)
		case <-time.After(5 * time.Second):
		}
	}
	return err
}

// poll calls cond every 50 ms until it returns nil or ctx ends; it
// returns cond's last error.
func poll(ctx context.Context, cond func() error) error {
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %w)", err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// rabbitmqctl runs rabbitmqctl -q with args on the broker's vhost. It
// reports false if rabbitmqctl is not installed. For a cluster's URL list
// (a private cluster of .ci/rabbitmq-cluster) it runs through the
// script, on a running node of that cluster.
func rabbitmqctl(ctx context.Context, brokerURL string, args ...string) (string, bool, error) {
	path, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		return "", false, nil
	}
	urls := amqpbus.SplitURLs(brokerURL)
	vhost := "/"
	if u, err := url.Parse(urls[0]); err == nil && strings.Trim(u.Path, "/") != "" {
		if v, err := url.PathUnescape(strings.TrimPrefix(u.Path, "/")); err == nil {
			vhost = v
		}
	}
	cmd := exec.CommandContext(ctx, path, append([]string{"-q", "-p", vhost}, args...)...)
	if len(urls) > 1 {
		script, serr := clusterScript()
		if serr != nil {
			return "", true, serr
		}
		cmd = exec.CommandContext(ctx, "bash", append([]string{script, "ctl", "-q", "-p", vhost}, args...)...)
	}
	out, err := cmd.Output()
	if err != nil {
		return "", true, fmt.Errorf("rabbitmqctl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), true, nil
}

// clusterScript returns the path of .ci/rabbitmq-cluster, from the module
// root above the test's directory.
func clusterScript() (string, error) {
	p, err := filepath.Abs(filepath.Join("..", ".ci", "rabbitmq-cluster"))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the cluster's script: %w", err)
	}
	return p, nil
}

// dialBroker connects to the broker, or to the first node of a
// cluster's URL list that answers, as name.
func dialBroker(brokerURL, name string) (*amqp.Connection, error) {
	var errs []error
	for _, u := range amqpbus.SplitURLs(brokerURL) {
		conn, err := amqp.DialConfig(u, amqp.Config{Properties: amqp.Table{"connection_name": name}})
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// queuesWithPrefix lists the broker's queues whose name starts with
// prefix+".", with their consumer counts.
func queuesWithPrefix(ctx context.Context, brokerURL, prefix string) (map[string]int, bool, error) {
	out, ok, err := rabbitmqctl(ctx, brokerURL, "list_queues", "name", "consumers")
	if !ok || err != nil {
		return nil, ok, err
	}
	qs := make(map[string]int)
	for _, line := range strings.Split(out, "\n") {
		var name string
		var consumers int
		if _, err := fmt.Sscanf(line, "%s %d", &name, &consumers); err == nil && strings.HasPrefix(name, prefix+".") {
			qs[name] = consumers
		}
	}
	return qs, true, nil
}

// deleteQueues deletes every queue of prefix the broker lists, and the
// names given (for when rabbitmqctl is missing), through an amqpbus
// transport. It returns the names it deleted.
func deleteQueues(ctx context.Context, brokerURL, prefix string, known []string) ([]string, error) {
	names := map[string]bool{}
	for _, q := range known {
		names[q] = true
	}
	listed, _, err := queuesWithPrefix(ctx, brokerURL, prefix)
	for q := range listed {
		names[q] = true
	}
	tr, derr := amqpbus.Dial(ctx, amqpbus.Config{URL: brokerURL, ConnectionName: "refnode process test cleanup"})
	if derr != nil {
		return nil, errors.Join(err, derr)
	}
	defer tr.Close()
	var deleted []string
	for q := range names {
		if qerr := tr.DeleteQueue(ctx, q); qerr != nil {
			err = errors.Join(err, qerr)
			continue
		}
		deleted = append(deleted, q)
	}
	return deleted, err
}
