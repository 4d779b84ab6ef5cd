// Package rabbitcluster gives tests a private three-node RabbitMQ cluster
// and the faults to inject into it: kill, graceful stop, freeze (SIGSTOP),
// thaw and restart of a node, and the placement of quorum queues and
// client connections.
//
// The cluster is started outside the tests by .ci/rabbitmq-cluster, which
// writes the nodes' AMQP URLs to a file; a test finds them in
// [URLsVar]:
//
//	bash .ci/rabbitmq-cluster start
//	export CLOUDBUS_AMQP_CLUSTER=$(cat /tmp/cloudbus-rabbit-cluster/urls)
//
//	func TestFailover(t *testing.T) {
//		c := rabbitcluster.FromEnv(t) // skips (or fails under CI=true) if unset
//		leader, err := c.Leader(ctx, queue)
//		...
//		err = c.Kill(ctx, leader)
//		...
//		err = c.Restart(ctx, leader)
//	}
//
// Nodes are indexed from 0 to [Cluster.Nodes]-1, the index of their URL
// in [Cluster.URLs] (the script numbers them from 1: index i is its node
// i+1, cbtest<i+1>@localhost). The faults act on the one cluster of the
// machine: tests that inject them must not run in parallel with each
// other, and must leave every node running (restart what they killed or
// stopped, thaw what they froze) so that the next test finds the cluster
// whole.
//
// The others see a frozen node down only after 0.75 to 1.25 tick times:
// 64-72 s with the default 60 s, 12-14 s when the cluster was started
// with CLOUDBUS_RABBIT_CLUSTER_NET_TICKTIME=10. The nodes handle
// partitions with pause_minority, but a node frozen past the tick time
// and thawed often stays split (running_partitioned_network) until it is
// restarted: a test that freezes a node that long restarts it if it does
// not come back. A killed node's [Cluster.Restart] takes about 10 s on a
// quiet machine, 45-130 s on one loaded 10 times over.
//
// The package is internal to cloudbus and only for tests.
package rabbitcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The variables and defaults the package and the script share.
const (
	// URLsVar names the cluster's nodes, as comma-separated amqp:// URLs
	// in node order (the script's urls file).
	URLsVar = "CLOUDBUS_AMQP_CLUSTER"
	// DirVar names the script's state directory; [DefaultDir] without it.
	DirVar = "CLOUDBUS_RABBIT_CLUSTER_DIR"
	// DefaultDir is the script's state directory when [DirVar] is unset.
	DefaultDir = "/tmp/cloudbus-rabbit-cluster"
	// Script is the path of the control script from the module root.
	Script = ".ci/rabbitmq-cluster"
)

// ErrNoQueue reports that the cluster has no quorum queue of the name
// asked for.
var ErrNoQueue = errors.New("rabbitcluster: no such quorum queue")

// ErrNoLeader reports a quorum queue without a leader on a known node, as
// while it elects one.
var ErrNoLeader = errors.New("rabbitcluster: quorum queue has no leader")

// Cluster is the private cluster named by [URLsVar], and the script that
// controls it. Its methods block while the script runs (a few seconds for
// a query, up to a minute for a restart) and stop it when ctx ends.
type Cluster struct {
	urls   []string
	script string
	dir    string
}

// FromEnv returns the cluster named by [URLsVar]. Without the variable
// the test skips with a hint to start the cluster, or fails under
// CI=true. It also fails the test if the script cannot be found above
// the working directory.
func FromEnv(t testing.TB) *Cluster {
	t.Helper()
	dir := os.Getenv(DirVar)
	if dir == "" {
		dir = DefaultDir
	}
	v := os.Getenv(URLsVar)
	if v == "" {
		hint := fmt.Sprintf("%s is not set; start the cluster with `bash %s start` and then `export %s=$(cat %s)`",
			URLsVar, Script, URLsVar, filepath.Join(dir, "urls"))
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s, as CI=true requires this test to run", hint)
			return nil
		}
		t.Skip(hint)
		return nil
	}
	script, err := findScript()
	if err != nil {
		t.Fatal(err)
		return nil
	}
	var urls []string
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return &Cluster{urls: urls, script: script, dir: dir}
}

// findScript walks up from the working directory to the module root (the
// directory holding go.mod) and returns the script's path there.
func findScript() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("rabbitcluster: working directory: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			s := filepath.Join(d, Script)
			if _, err := os.Stat(s); err != nil {
				return "", fmt.Errorf("rabbitcluster: module root %s has no %s: %w", d, Script, err)
			}
			return s, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("rabbitcluster: no go.mod above %s, so no %s", wd, Script)
		}
	}
}

// URLs returns the nodes' AMQP URLs, node i's at index i.
func (c *Cluster) URLs() []string { return append([]string(nil), c.urls...) }

// Nodes returns the number of nodes.
func (c *Cluster) Nodes() int { return len(c.urls) }

// Kill kills node i with SIGKILL and returns once it is gone.
func (c *Cluster) Kill(ctx context.Context, i int) error { return c.nodeCmd(ctx, "kill", i) }

// StopNode shuts node i down gracefully (SIGTERM, SIGKILL after 10 s) and
// returns once it is gone.
func (c *Cluster) StopNode(ctx context.Context, i int) error { return c.nodeCmd(ctx, "stop-node", i) }

// Freeze stops node i's beam.smp with SIGSTOP: it answers nothing while
// its sockets stay open. The other nodes notice only after Erlang's net
// tick time (see the package doc); call [Cluster.Thaw] before the test
// ends.
func (c *Cluster) Freeze(ctx context.Context, i int) error { return c.nodeCmd(ctx, "freeze", i) }

// Thaw resumes node i frozen by [Cluster.Freeze].
func (c *Cluster) Thaw(ctx context.Context, i int) error { return c.nodeCmd(ctx, "thaw", i) }

// Restart starts node i, killed or stopped, again on its kept data, and
// returns once another node sees it running in the cluster.
func (c *Cluster) Restart(ctx context.Context, i int) error { return c.nodeCmd(ctx, "restart", i) }

func (c *Cluster) nodeCmd(ctx context.Context, cmd string, i int) error {
	if i < 0 || i >= c.Nodes() {
		return fmt.Errorf("rabbitcluster: %s: node index %d out of 0..%d", cmd, i, c.Nodes()-1)
	}
	_, err := c.run(ctx, cmd, strconv.Itoa(i+1))
	return err
}

// run runs the script and returns its standard output; its error quotes
// all the script printed.
func (c *Cluster) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...)
	cmd.Env = append(os.Environ(), DirVar+"="+c.dir)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("rabbitcluster: %s %s: %w\n%s%s", Script, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// nodeRE finds the script's node names, cbtest<N>@host, N from 1.
var nodeRE = regexp.MustCompile(`cbtest([0-9]+)@`)

// nodeIndexes returns the indexes of the nodes named in s, in order.
func nodeIndexes(s string) []int {
	var out []int
	for _, m := range nodeRE.FindAllStringSubmatch(s, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n-1)
	}
	return out
}

// queueRow returns the script's row for the quorum queue: name, type,
// leader, members, online.
func (c *Cluster) queueRow(ctx context.Context, queue string) ([]string, error) {
	out, err := c.run(ctx, "queues", queue)
	if err != nil {
		return nil, err
	}
	return parseQueueRow(out, queue)
}

func parseQueueRow(out, queue string) ([]string, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) == 5 && f[0] == queue {
			return f, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNoQueue, queue)
}

// Queue is a quorum queue as the cluster lists it.
type Queue struct {
	// Name is the queue's name.
	Name string
	// Leader is the index of the node leading it, -1 while it has none.
	Leader int
	// Members are the indexes of the nodes holding a replica of it.
	Members []int
	// Online are those of its members that are running.
	Online []int
}

// Queues returns every quorum queue whose name starts with prefix ("":
// all), in one call of the script: cheaper than [Cluster.Members] per
// queue when a test checks many.
func (c *Cluster) Queues(ctx context.Context, prefix string) ([]Queue, error) {
	out, err := c.run(ctx, "queues")
	if err != nil {
		return nil, err
	}
	return parseQueues(out, prefix), nil
}

func parseQueues(out, prefix string) []Queue {
	var qs []Queue
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		q := Queue{Name: f[0], Leader: -1, Members: nodeIndexes(f[3]), Online: nodeIndexes(f[4])}
		if l := nodeIndexes(f[2]); len(l) == 1 {
			q.Leader = l[0]
		}
		qs = append(qs, q)
	}
	return qs
}

// Leader returns the index of the node leading the quorum queue, or
// [ErrNoQueue], or [ErrNoLeader] while it has none.
func (c *Cluster) Leader(ctx context.Context, queue string) (int, error) {
	row, err := c.queueRow(ctx, queue)
	if err != nil {
		return -1, err
	}
	l := nodeIndexes(row[2])
	if len(l) != 1 {
		return -1, fmt.Errorf("%w: %q shows leader %q", ErrNoLeader, queue, row[2])
	}
	return l[0], nil
}

// Members returns the indexes of the quorum queue's members that are
// online, in the order RabbitMQ lists them, or [ErrNoQueue].
func (c *Cluster) Members(ctx context.Context, queue string) (online []int, err error) {
	row, err := c.queueRow(ctx, queue)
	if err != nil {
		return nil, err
	}
	return nodeIndexes(row[4]), nil
}

// ConnectionsPerNode returns the number of client connections on each
// node that has any, as a running node lists them. A frozen node makes it
// wait for the script's 15 s timeout and fail.
func (c *Cluster) ConnectionsPerNode(ctx context.Context) (map[int]int, error) {
	out, err := c.run(ctx, "connections")
	if err != nil {
		return nil, err
	}
	return parseConnections(out)
}

// parseConnections reads "COUNT NODE" lines.
func parseConnections(out string) (map[int]int, error) {
	m := map[int]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.Atoi(f[0])
		idx := nodeIndexes(line)
		if err != nil || len(f) != 2 || len(idx) != 1 {
			return nil, fmt.Errorf("rabbitcluster: unexpected line %q from %s connections", line, Script)
		}
		m[idx[0]] += n
	}
	return m, nil
}

// Running returns the indexes of the nodes running RabbitMQ, as the first
// node that answers sees them.
func (c *Cluster) Running(ctx context.Context) ([]int, error) {
	out, err := c.run(ctx, "running")
	if err != nil {
		return nil, err
	}
	return nodeIndexes(out), nil
}

// WaitRunning polls until n nodes run RabbitMQ, as the first node that
// answers sees them, and returns the last error or count when ctx ends.
func (c *Cluster) WaitRunning(ctx context.Context, n int) error {
	for {
		got, err := c.Running(ctx)
		if err == nil && len(got) == n {
			return nil
		}
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			if err != nil {
				return fmt.Errorf("rabbitcluster: waiting for %d running nodes: %w (last: %w)", n, ctx.Err(), err)
			}
			return fmt.Errorf("rabbitcluster: waiting for %d running nodes, saw %v: %w", n, got, ctx.Err())
		case <-t.C:
		}
	}
}
