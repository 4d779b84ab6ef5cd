package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
)

// The fault harness's look at the broker and at the nodes' logs: a
// janitor connection that tells whether a queue exists and how many
// messages it holds (AMQP cannot list queues, but a passive declare
// answers for one name), and the lines a node logged, with their times.

// nodeServices are the services whose queues every node declares,
// <prefix>.message.<service>.<node>: refnode's three and the SDK's
// membership service.
var nodeServices = []string{api.HostService, api.ImageService, api.VMService, "cloudbus-membership"}

// nodeQueues returns the service queues of node under prefix.
func nodeQueues(prefix, node string) []string {
	qs := make([]string, len(nodeServices))
	for i, svc := range nodeServices {
		qs[i] = prefix + ".message." + svc + "." + node
	}
	return qs
}

// janitor inspects queues on its own AMQP connection, one channel per
// question (a passive declare of a missing queue closes its channel). It
// is safe for use by one goroutine at a time.
type janitor struct {
	conn *amqp.Connection
}

// newJanitor connects to the broker; the connection closes when the
// test ends.
func newJanitor(t *testing.T, brokerURL string) *janitor {
	t.Helper()
	conn, err := dialBroker(brokerURL, "refnode process test janitor")
	require.NoError(t, err, "the janitor connects to the broker")
	t.Cleanup(func() { _ = conn.Close() })
	return &janitor{conn: conn}
}

// queueState is what the broker says of one queue.
type queueState struct {
	Name      string
	Exists    bool
	Messages  int // ready ones (RabbitMQ counts no unacknowledged message here)
	Consumers int
}

// String is "name: gone", or "name: 3 messages, 1 consumer".
func (q queueState) String() string {
	if !q.Exists {
		return q.Name + ": gone"
	}
	return fmt.Sprintf("%s: %d messages, %d consumers", q.Name, q.Messages, q.Consumers)
}

// inspect asks the broker about queue with a passive declare: a 404
// means it does not exist.
func (j *janitor) inspect(queue string) (queueState, error) {
	st := queueState{Name: queue}
	ch, err := j.conn.Channel()
	if err != nil {
		return st, fmt.Errorf("janitor: open a channel: %w", err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return st, nil // the broker closed the channel
	case err != nil:
		_ = ch.Close()
		return st, fmt.Errorf("janitor: passive declare %s: %w", queue, err)
	}
	_ = ch.Close()
	st.Exists, st.Messages, st.Consumers = true, q.Messages, q.Consumers
	return st, nil
}

// inspectAll inspects every queue of queues, in order.
func (j *janitor) inspectAll(queues []string) ([]queueState, error) {
	out := make([]queueState, 0, len(queues))
	for _, q := range queues {
		st, err := j.inspect(q)
		if err != nil {
			return out, err
		}
		out = append(out, st)
	}
	return out, nil
}

// existing returns the states of the queues that exist.
func existing(states []queueState) []queueState {
	return slices.DeleteFunc(slices.Clone(states), func(q queueState) bool { return !q.Exists })
}

// holding returns the states of the queues that hold messages.
func holding(states []queueState) []queueState {
	return slices.DeleteFunc(slices.Clone(states), func(q queueState) bool { return q.Messages == 0 })
}

// logLine is one line of a node's stderr with its slog time.
type logLine struct {
	At   time.Time
	Text string
}

// logLines returns the lines of the child's stderr that contain every one
// of subs, oldest first.
func (c *child) logLines(subs ...string) []logLine {
	_, errOut := c.output()
	return grepLog(errOut, subs...)
}

// stderrSize returns the size of the child's stderr so far: an offset
// for logLinesFrom.
func (c *child) stderrSize() int64 {
	fi, err := os.Stat(c.stderr)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logLinesFrom is logLines over the child's stderr from byte offset
// from on (from stderrSize): a poll reads only what is new.
func (c *child) logLinesFrom(from int64, subs ...string) []logLine {
	f, err := os.Open(c.stderr)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil
	}
	return grepLog(string(b), subs...)
}

// grepLog returns the slog lines of text (time=… first) that contain
// every one of subs.
func grepLog(text string, subs ...string) []logLine {
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue lines
			}
		}
		v, _, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !ok || !strings.HasPrefix(line, "time=") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			continue
		}
		out = append(out, logLine{At: at, Text: line})
	}
	return out
}

// firstLogged returns the earliest line, among the children's stderr,
// that contains every one of subs, and who logged it.
func firstLogged(procs []*child, subs ...string) (logLine, *child, bool) {
	var first logLine
	var by *child
	for _, c := range procs {
		if ls := c.logLines(subs...); len(ls) > 0 && (by == nil || ls[0].At.Before(first.At)) {
			first, by = ls[0], c
		}
	}
	return first, by, by != nil
}

// pollEvery calls cond every d until it returns nil or ctx ends; it
// returns cond's last error (poll, at a pace for costly conditions).
func pollEvery(ctx context.Context, d time.Duration, cond func() error) error {
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %w)", err, ctx.Err())
		case <-time.After(d):
		}
	}
}

// TestJanitor checks the janitor on the broker: a queue it declared
// holds the messages published to it, a missing queue is gone, and the
// janitor's connection survives the channel a 404 closed.
func TestJanitor(t *testing.T) {
	broker := testenv.AMQPURL(t)
	j := newJanitor(t, broker)
	queue := "refnode-test-janitor-" + randomHex(4)
	ch, err := j.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		ch, err := j.conn.Channel()
		if err == nil {
			_, err = ch.QueueDelete(queue, false, false, false)
			_ = ch.Close()
		}
		assert.NoError(t, err, "delete %s", queue)
	})
	for range 2 {
		require.NoError(t, ch.PublishWithContext(t.Context(), "", queue, true, false, amqp.Publishing{Body: []byte("x")}))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var st queueState
	require.NoError(t, poll(ctx, func() error {
		if st, err = j.inspect(queue); err == nil && st.Messages != 2 {
			err = fmt.Errorf("%s", st)
		}
		return err
	}), "the queue holds the 2 messages")
	assert.Equal(t, queueState{Name: queue, Exists: true, Messages: 2}, st)
	assert.Equal(t, queue+": 2 messages, 0 consumers", st.String())

	states, err := j.inspectAll([]string{queue + "-missing", queue})
	require.NoError(t, err, "a 404 closes only its channel")
	assert.Equal(t, []queueState{{Name: queue + "-missing"}, st}, states)
	assert.Equal(t, queue+"-missing: gone", states[0].String())
	assert.Equal(t, []queueState{st}, existing(states))
	assert.Equal(t, []queueState{st}, holding(states))
	assert.Equal(t, []string{"p.message.host.n", "p.message.image.n", "p.message.vmInstance.n", "p.message.cloudbus-membership.n"},
		nodeQueues("p", "n"))
}
