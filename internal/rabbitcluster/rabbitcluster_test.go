package rabbitcluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeT records what FromEnv does to its test instead of doing it.
type fakeT struct {
	testing.TB // nil: any other method panics
	skipped    string
	failed     string
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Skip(args ...any)                  { f.skipped = fmt.Sprint(args...) }
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }
func (f *fakeT) Fatal(args ...any)                 { f.failed = fmt.Sprint(args...) }

func TestFromEnvUnset(t *testing.T) {
	t.Setenv(URLsVar, "")
	t.Setenv(DirVar, "/tmp/elsewhere")

	t.Setenv("CI", "")
	f := &fakeT{}
	assert.Nil(t, FromEnv(f))
	assert.Contains(t, f.skipped, URLsVar)
	assert.Contains(t, f.skipped, "bash .ci/rabbitmq-cluster start")
	assert.Contains(t, f.skipped, "/tmp/elsewhere/urls")
	assert.Empty(t, f.failed)

	t.Setenv("CI", "true")
	f = &fakeT{}
	assert.Nil(t, FromEnv(f))
	assert.Contains(t, f.failed, URLsVar)
	assert.Contains(t, f.failed, "bash .ci/rabbitmq-cluster start")
	assert.Empty(t, f.skipped)
}

func TestFromEnvFindsScript(t *testing.T) {
	t.Setenv(URLsVar, "amqp://a/, amqp://b/,amqp://c/")
	c := FromEnv(t)
	assert.Equal(t, []string{"amqp://a/", "amqp://b/", "amqp://c/"}, c.URLs())
	assert.Equal(t, 3, c.Nodes())
	assert.FileExists(t, c.script)
	assert.ErrorContains(t, c.Kill(context.Background(), 3), "out of 0..2")
}

func TestParse(t *testing.T) {
	out := "q1\tquorum\tcbtest2@localhost\t[cbtest1@localhost, cbtest2@localhost, cbtest3@localhost]\t[cbtest2@localhost, cbtest3@localhost]\n"
	row, err := parseQueueRow(out, "q1")
	require.NoError(t, err)
	assert.Equal(t, []int{1}, nodeIndexes(row[2]))
	assert.Equal(t, []int{0, 1, 2}, nodeIndexes(row[3]))
	assert.Equal(t, []int{1, 2}, nodeIndexes(row[4]))
	_, err = parseQueueRow(out, "q2")
	assert.ErrorIs(t, err, ErrNoQueue)
	qs := parseQueues(out+"p.a\tquorum\t\t[cbtest1@localhost, cbtest3@localhost]\t[]\nother\tquorum\tcbtest1@localhost\t[]\t[]\n", "p.")
	assert.Equal(t, []Queue{{Name: "p.a", Leader: -1, Members: []int{0, 2}}}, qs)
	assert.Len(t, parseQueues(out, ""), 1)

	m, err := parseConnections("      2 cbtest1@localhost\n      1 cbtest3@localhost\n")
	require.NoError(t, err)
	assert.Equal(t, map[int]int{0: 2, 2: 1}, m)
	_, err = parseConnections("what\n")
	assert.Error(t, err)
}

// TestCluster connects to every node, declares a quorum queue and reads
// its leader, members and the connections per node.
func TestCluster(t *testing.T) {
	c := FromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, c.WaitRunning(ctx, c.Nodes()))

	var chans []*amqp.Channel
	for i, u := range c.URLs() {
		conn, err := amqp.Dial(u)
		require.NoError(t, err, "node %d", i)
		t.Cleanup(func() { _ = conn.Close() })
		ch, err := conn.Channel()
		require.NoError(t, err, "node %d", i)
		chans = append(chans, ch)
	}

	q := "rabbitcluster-test-" + uuid.NewString()
	_, err := chans[0].QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	defer func() {
		_, err := chans[1].QueueDelete(q, false, false, false)
		assert.NoError(t, err)
		_, err = c.Leader(ctx, q)
		assert.ErrorIs(t, err, ErrNoQueue)
	}()

	// A new queue elects its leader at once, but poll: the listing may
	// show none for a moment.
	var leader int
	for {
		leader, err = c.Leader(ctx, q)
		if !errors.Is(err, ErrNoLeader) || ctx.Err() != nil {
			break
		}
	}
	require.NoError(t, err)
	assert.True(t, leader >= 0 && leader < c.Nodes(), "leader %d", leader)
	online, err := c.Members(ctx, q)
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{0, 1, 2}, online)

	perNode, err := c.ConnectionsPerNode(ctx)
	require.NoError(t, err)
	for i := range c.Nodes() {
		assert.GreaterOrEqual(t, perNode[i], 1, "connections on node %d: %v", i, perNode)
	}
}
