package volume_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/examples/volume"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(buildFirst{m}) }

// TestAttachRunsOnTheOwner is the README's test: three nodes on SQLite,
// the same repository as production; an attach runs on the volume's
// owner.
func TestAttachRunsOnTheOwner(t *testing.T) {
	reg := message.NewRegistry()
	require.NoError(t, volume.Register(reg))
	c := servicetest.Start(t, servicetest.Options{Nodes: 3, Database: "sqlite", Schema: &volume.Schema, Registry: reg,
		Services: func(_ int, env nodekit.Env) []service.Service { return []service.Service{volume.New(env)} }})
	cl := c.Client(t)
	v, err := service.Call[volume.Volume](t.Context(), cl, volume.CreateVolume{Name: "data", SizeGB: 10})
	require.NoError(t, err)
	v, err = service.Call[volume.Volume](t.Context(), cl, volume.AttachVolume{Volume: v.UUID, VM: message.NewUUID()})
	require.NoError(t, err)
	assert.Equal(t, c.Owner(v.UUID), v.Node)
	assert.Equal(t, int64(2), v.Version)
}

// databases runs test on SQLite, and on PostgreSQL and MySQL/MariaDB
// when their variables are set (in CI they must be).
func databases(t *testing.T, test func(t *testing.T, db string)) {
	t.Run("sqlite", func(t *testing.T) { test(t, "sqlite") })
	t.Run("postgres", func(t *testing.T) { test(t, testenv.PostgresDSN(t)) })
	t.Run("mysql", func(t *testing.T) { test(t, testenv.MySQLDSN(t)) })
}

// cluster is a test cluster of the volume service, and each node's
// environment (to read the tables the nodes write).
type cluster struct {
	*servicetest.Cluster
	envs map[int]nodekit.Env
	cl   *service.Client
}

func start(t *testing.T, db string, nodes int) *cluster {
	reg := message.NewRegistry()
	require.NoError(t, volume.Register(reg))
	c := &cluster{envs: make(map[int]nodekit.Env)}
	envs := make(chan struct {
		i   int
		env nodekit.Env
	}, nodes)
	c.Cluster = servicetest.Start(t, servicetest.Options{Nodes: nodes, Database: db, Schema: &volume.Schema, Registry: reg,
		Services: func(i int, env nodekit.Env) []service.Service {
			envs <- struct {
				i   int
				env nodekit.Env
			}{i, env}
			return []service.Service{volume.New(env)}
		}})
	for range nodes {
		e := <-envs
		c.envs[e.i] = e.env
	}
	c.cl = c.Client(t)
	return c
}

// repo is the repository on node 0's pool, to read what every node wrote.
func (c *cluster) repo() *volume.Repo { return volume.NewRepo(c.envs[0]) }

func call[R any](t *testing.T, c *cluster, msg any, opts ...bus.Option) (R, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	return service.Call[R](ctx, c.cl, msg, opts...)
}

// TestTakeover: the owner of a volume is killed; an attach with retries
// runs on the new owner, and each operation was applied once.
func TestTakeover(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		c := start(t, db, 3)
		v, err := call[volume.Volume](t, c, volume.CreateVolume{Name: "data", SizeGB: 10})
		require.NoError(t, err)
		owner := c.Owner(v.UUID)
		vm := message.NewUUID()
		v, err = call[volume.Volume](t, c, volume.AttachVolume{Volume: v.UUID, VM: vm})
		require.NoError(t, err)
		require.Equal(t, owner, v.Node)

		c.Kill(owner)
		killed := time.Now()
		v, err = call[volume.Volume](t, c, volume.DetachVolume{Volume: v.UUID}, bus.WithRetry(3))
		require.NoError(t, err, "the detach runs on the new owner")
		t.Logf("%s: the detach after the kill was answered by the new owner %s after %s", db[:min(len(db), 8)], v.Node, time.Since(killed).Round(time.Millisecond))
		assert.NotEqual(t, owner, v.Node)
		assert.Empty(t, v.AttachedTo)
		assert.Equal(t, int64(3), v.Version, "created, attached, detached: each once")

		events, err := c.repo().Events(t.Context())
		require.NoError(t, err)
		assert.Len(t, events, 2)
		for id, n := range events {
			assert.Equal(t, 1, n, "message %s applied once", id)
		}
	})
}

// TestDuplicateRunsOnce: the same attach, delivered three times with
// one message id, runs once and gets the first reply each time.
func TestDuplicateRunsOnce(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		c := start(t, db, 3)
		v, err := call[volume.Volume](t, c, volume.CreateVolume{Name: "data", SizeGB: 10})
		require.NoError(t, err)
		id, attach := message.NewUUID(), volume.AttachVolume{Volume: v.UUID, VM: message.NewUUID()}
		var replies []volume.Volume
		for range 3 {
			r, err := call[volume.Volume](t, c, attach, bus.WithID(id))
			require.NoError(t, err)
			replies = append(replies, r)
		}
		assert.Equal(t, replies[0], replies[1])
		assert.Equal(t, replies[0], replies[2])
		assert.Equal(t, int64(2), replies[0].Version)
		events, err := c.repo().Events(t.Context())
		require.NoError(t, err)
		assert.Equal(t, map[string]int{id: 1}, events, "applied once")

		_, err = call[volume.Volume](t, c, volume.AttachVolume{Volume: v.UUID, VM: message.NewUUID()})
		assert.ErrorIs(t, err, volume.ErrInUse, "another attach is refused with the service's own code")
		assert.Equal(t, message.RetryNever, message.AsError(err).Retry())
	})
}

// TestStaleOwnerCannotCommit: an owner paused with an attach in hand
// loses its heartbeat and is evicted, and the new owner attaches the
// volume; the old owner's write, resumed, fails with fence.ErrStale and
// changes nothing. Paused before its transaction, on every database; and
// paused inside it (its check passed, the token row locked) on
// PostgreSQL and MariaDB, where the node kit's idle-transaction bound
// ends the paused transaction so that the new owner's write can go on.
func TestStaleOwnerCannotCommit(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		t.Run("paused before its transaction", func(t *testing.T) { staleOwner(t, db, false) })
		t.Run("paused inside its transaction", func(t *testing.T) {
			if db == "sqlite" {
				t.Skip("SQLite has one writer: a paused write transaction holds every write, the heartbeats' too (see package fence)")
			}
			staleOwner(t, db, true)
		})
	})
}

func staleOwner(t *testing.T, db string, inside bool) {
	c := start(t, db, 3)
	v, err := call[volume.Volume](t, c, volume.CreateVolume{Name: "data", SizeGB: 10})
	require.NoError(t, err)
	owner := c.Owner(v.UUID)
	var env nodekit.Env
	for i, e := range c.envs {
		if c.Node(i).UUID() == owner {
			env = e
		}
	}
	// The owner's attach, as its handler runs it: a fenced write with
	// the owner's claim, paused until the owner is evicted and the new
	// owner has written.
	claim := fence.Claim{Resource: v.UUID, Node: owner, Epoch: c.NodeByUUID(owner).Epoch()}
	key := fence.NewKey(message.NewUUID(), "volume.v1.AttachVolume", []byte(v.UUID))
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		if !inside {
			close(entered)
			<-release
		}
		_, err := volume.NewRepo(env).Update(context.Background(), fence.Guard{Claim: claim, Key: key}, v.UUID, "attach", func(v *volume.Volume) error {
			if inside {
				close(entered)
				<-release
			}
			v.AttachedTo = message.NewUUID()
			return nil
		})
		done <- err
	}()
	<-entered
	c.StopHeartbeat(owner)
	c.WaitGone(t, owner, 30*time.Second)
	v, err = call[volume.Volume](t, c, volume.AttachVolume{Volume: v.UUID, VM: message.NewUUID()}, bus.WithRetry(3))
	require.NoError(t, err, "the new owner attaches")
	assert.NotEqual(t, owner, v.Node)
	assert.Equal(t, int64(2), v.Version)

	close(release)
	err = <-done
	require.ErrorIs(t, err, fence.ErrStale, "the evicted owner cannot commit")
	assert.ErrorIs(t, err, message.ErrNotOwner)
	t.Logf("the stale owner's commit: %v", err)

	got, err := c.repo().Get(t.Context(), v.UUID)
	require.NoError(t, err)
	assert.Equal(t, v, volume.Volume{UUID: got.UUID, Name: got.Name, SizeGB: got.SizeGB, AttachedTo: got.AttachedTo, Version: got.Version, Node: v.Node},
		"the new owner's attach stands; the stale write changed nothing")
	events, err := c.repo().Events(t.Context())
	require.NoError(t, err)
	assert.NotContains(t, events, key.ID, "no event of the stale write")
}
