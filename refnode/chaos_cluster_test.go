package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The chaos test's view of the cluster around the load: each node's
// goroutines and RSS, the drain of the queues, and the nodes' files,
// kept when the test fails.

// nodeResources are a node's goroutines and RSS at one moment.
type nodeResources struct {
	label      string
	goroutines int
	rss        uint64
	err        error
}

// snapshot measures every running node.
func snapshot(fc *faultCluster) []nodeResources {
	var out []nodeResources
	for _, c := range fc.Running() {
		r := nodeResources{label: c.label}
		r.goroutines, r.err = goroutinesOf(c)
		if rss, err := rssOf(c.cmd.Process.Pid); err == nil {
			r.rss = rss
		} else if r.err == nil {
			r.err = err
		}
		out = append(out, r)
	}
	return out
}

// goroutinesOf reads a node's goroutine count from its admin server
// (refnode serve -test-pprof).
func goroutinesOf(c *child) (int, error) {
	resp, err := httpClient.Get(c.admin + "/debug/pprof/goroutine")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("node %s's goroutine profile: %w", c.label, err)
	}
	var n int
	if _, err := fmt.Sscanf(line, "goroutine profile: total %d", &n); err != nil {
		return 0, fmt.Errorf("node %s's goroutine profile begins %q: %w", c.label, line, err)
	}
	return n, nil
}

// awaitDrained waits until every queue of the cluster's prefix holds no
// message and no queue of a node that is not running is left, and
// returns how long that took after since, with the last state seen (a
// queue left names its consumers' tags, which name their processes).
//
// A quorum queue of a node that is gone with no replica running on any
// broker node (rabbitmqctl's online column empty) is a RabbitMQ 3.10
// ghost, not a queue the nodes left: its deletion ran while one of its
// broker nodes restarted, and that node's recovery kept its record
// (docs/operations.md). It holds no message and nothing routes to it;
// it is listed in the state, and does not fail the wait. So is one with
// fewer than a majority of its replicas running once every broker node
// runs: no leader can serve it (such a queue was seen left once, its
// replica lists not recorded; the state now prints them).
func awaitDrained(ctx context.Context, fc *faultCluster, since time.Time) (time.Duration, string, error) {
	ctx, cancel := context.WithTimeout(ctx, chaosDrainBound)
	defer cancel()
	live := map[string]bool{}
	for _, c := range fc.Running() {
		live[c.id] = true
	}
	known := []string{fc.Prefix() + ".message.api.portal", fc.Prefix() + ".dead"}
	for id := range fc.Labels() {
		known = append(known, nodeQueues(fc.Prefix(), id)...)
	}
	var state string
	// What the wait waited on, for the report: listings that hung, and
	// the last state that was not drained yet.
	var listings, hung int
	var lastWait string
	err := pollEvery(ctx, 250*time.Millisecond, func() error {
		// A listing that hangs (the broker waits on a queue without a
		// leader) is tried again, not waited on for the whole bound.
		listings++
		lctx, cancel := context.WithTimeout(ctx, chaosDrainBound/4)
		qs, err := queueMessages(lctx, fc.broker, fc.Prefix(), known)
		cancel()
		if err != nil {
			if lctx.Err() != nil {
				hung++
			}
			lastWait = fmt.Sprintf("+%s: %v", time.Since(since).Round(time.Millisecond), err)
			return err
		}
		var bad, ghosts []string
		for _, full := range slices.Sorted(maps.Keys(qs)) {
			q := strings.TrimPrefix(full, fc.Prefix()+".") // the message names the prefix once
			dead, of := "", ""
			for id, label := range fc.Labels() {
				if strings.HasSuffix(q, "."+id) && !live[id] {
					dead = label
				}
				if strings.Contains(q, id) {
					of = " (" + label + ")"
				}
			}
			switch {
			case dead != "" && qs[full].ghost && qs[full].messages == 0:
				ghosts = append(ghosts, fmt.Sprintf("%s of %s", q, dead))
			case dead != "":
				bad = append(bad, fmt.Sprintf("%s of %s, which is gone: %d messages, %s", q, dead, qs[full].messages, qs[full].consumerList()))
			case qs[full].messages > 0:
				bad = append(bad, fmt.Sprintf("%s%s: %d messages, %s", q, of, qs[full].messages, qs[full].consumerList()))
			}
		}
		// What is left comes first: CI's brief of a failure keeps only
		// the start of a long line.
		state = fmt.Sprintf("%d queues", len(qs))
		if len(bad) > 0 {
			state = fmt.Sprintf("%d not drained: %s; of %s", len(bad), strings.Join(bad, "; "), state)
		}
		if len(ghosts) > 0 {
			state += fmt.Sprintf(" (%d RabbitMQ ghost quorum queues of gone nodes, without a majority of their replicas running: %s)", len(ghosts), strings.Join(ghosts, "; "))
		}
		if len(bad) > 0 {
			lastWait = fmt.Sprintf("+%s: %s", time.Since(since).Round(time.Millisecond), state)
			return fmt.Errorf("%s", state)
		}
		return nil
	})
	state += fmt.Sprintf("; %d listings, %d of them hung past %s", listings, hung, chaosDrainBound/4)
	if lastWait != "" {
		state += "; the last not drained, at " + lastWait
	}
	return time.Since(since), state, err
}

// queueLoad is a queue's messages (ready and unacknowledged) and
// consumers, with their tags when rabbitmqctl listed them.
type queueLoad struct {
	messages, consumers int
	tags                []string
	online, members     []string // a quorum queue's replicas running, and all its replicas
	ghost               bool     // a quorum queue without a majority of its replicas running (rabbitmqctl's online: [] or too few)
}

func (q queueLoad) consumerList() string {
	s := fmt.Sprintf("%d consumers", q.consumers)
	if len(q.tags) > 0 {
		s += " (" + strings.Join(q.tags, ", ") + ")"
	}
	if q.members != nil {
		s += fmt.Sprintf(", replicas running %v of %v", q.online, q.members)
	}
	return s
}

// nodeList reads a list of broker nodes as rabbitmqctl prints it:
// "[n1@host, n2@host]".
func nodeList(s string) []string {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]"))
	if s == "" {
		return nil
	}
	l := strings.Split(s, ",")
	for i := range l {
		l[i] = strings.TrimSpace(l[i])
	}
	return l
}

// parseQueueList reads rabbitmqctl list_queues name messages consumers
// type online members (tab-separated) for the queues of prefix.
func parseQueueList(out, prefix string) map[string]queueLoad {
	qs := map[string]queueLoad{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 3 || !strings.HasPrefix(f[0], prefix+".") {
			continue
		}
		n, nerr := strconv.Atoi(f[1])
		c, cerr := strconv.Atoi(f[2])
		if nerr != nil || cerr != nil {
			continue
		}
		q := queueLoad{messages: n, consumers: c}
		if len(f) >= 5 && f[3] == "quorum" {
			q.online = nodeList(f[4])
			if len(f) >= 6 {
				q.members = nodeList(f[5])
			}
			// No replica running, or fewer than a majority of its
			// members: no leader can be elected, whatever the broker
			// nodes do (they all run when this is read).
			q.ghost = len(q.online) == 0 || len(q.online) < len(q.members)/2+1
		}
		qs[f[0]] = q
	}
	return qs
}

// queueMessages returns the queues of prefix with their messages and
// consumers, from rabbitmqctl (with the consumers' tags); without it,
// from a passive declare of each known name (ready messages only).
func queueMessages(ctx context.Context, broker, prefix string, known []string) (map[string]queueLoad, error) {
	out, ok, err := rabbitmqctl(ctx, broker, "list_queues", "name", "messages", "consumers", "type", "online", "members")
	if ok {
		if err != nil {
			return nil, err
		}
		qs := parseQueueList(out, prefix)
		if out, _, err := rabbitmqctl(ctx, broker, "list_consumers", "queue_name", "consumer_tag"); err == nil {
			for _, line := range strings.Split(out, "\n") {
				name, tag, ok := strings.Cut(line, "\t")
				if q, found := qs[name]; ok && found {
					q.tags = append(q.tags, tag)
					qs[name] = q
				}
			}
		}
		return qs, nil
	}
	j, err := dialJanitor(broker)
	if err != nil {
		return nil, err
	}
	defer j.conn.Close()
	states, err := j.inspectAll(known)
	if err != nil {
		return nil, err
	}
	qs := map[string]queueLoad{}
	for _, s := range existing(states) {
		qs[s.Name] = queueLoad{messages: s.Messages, consumers: s.Consumers}
	}
	return qs, nil
}

// copyNodeFiles copies the stdout, stderr and op log of every process
// the cluster ran into dir.
func copyNodeFiles(t *testing.T, fc *faultCluster, dir string) {
	for _, n := range fc.Nodes() {
		for i, c := range n.runs {
			for _, src := range []string{c.stdout, c.stderr, n.opLogs[i]} {
				b, err := os.ReadFile(src)
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, filepath.Base(src)), b, 0o644)
				}
				if err != nil {
					t.Logf("keep %s: %v", filepath.Base(src), err)
				}
			}
		}
	}
	t.Logf("the nodes' logs and op logs are in %s", dir)
}

// TestParseQueueList: rabbitmqctl's queue list, quorum queues with no
// replica or too few running among them.
func TestParseQueueList(t *testing.T) {
	all := []string{"n1@localhost", "n2@localhost", "n3@localhost"}
	out := "name\tmessages\tconsumers\ttype\tonline\tmembers\n" +
		"p.message.image.a\t0\t1\tquorum\t[n1@localhost, n2@localhost, n3@localhost]\t[n1@localhost, n2@localhost, n3@localhost]\n" +
		"p.message.image.b\t0\t0\tquorum\t[]\t[n1@localhost, n2@localhost, n3@localhost]\n" +
		"p.message.image.c\t0\t0\tquorum\t[n2@localhost]\t[n1@localhost, n2@localhost, n3@localhost]\n" +
		"p.message.image.d\t0\t0\tquorum\t[n1@localhost, n2@localhost]\t[n1@localhost, n2@localhost, n3@localhost]\n" +
		"p.reply.c\t2\t1\tclassic\t\t\n" +
		"other.message.x\t5\t0\tquorum\t[]\t[]\n"
	assert.Equal(t, map[string]queueLoad{
		"p.message.image.a": {consumers: 1, online: all, members: all},
		"p.message.image.b": {ghost: true, members: all},
		"p.message.image.c": {ghost: true, online: []string{"n2@localhost"}, members: all},
		"p.message.image.d": {online: all[:2], members: all},
		"p.reply.c":         {messages: 2, consumers: 1},
	}, parseQueueList(out, "p"))
}
