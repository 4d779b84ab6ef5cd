package nodekit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
)

// noServices is a Config.Services of a node with none.
func noServices(context.Context, Env) ([]service.Service, error) { return nil, nil }

// TestStartWaitsForTheServers: a node started while PostgreSQL and
// RabbitMQ reset every connection (down, or restarting) keeps trying and
// opens once they answer, 1 s and 2 s later; with -start-wait 0 it fails
// at once.
func TestStartWaitsForTheServers(t *testing.T) {
	amqpURL, dsn := testenv.AMQPURL(t), testenv.PostgresDSN(t)
	db, dbURL := proxy.NewURL(t, dsn)
	broker, busURL := proxy.NewURL(t, amqpURL)
	s := Settings{Bus: busURL, DB: dbURL, Prefix: "nodekit-wait-" + message.NewUUID()[:8], StartWait: 20 * time.Second}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Bus, s.DB = amqpURL, dsn
		_, err := Purge(ctx, s, "waittest")
		assert.NoError(t, err, "purge the test's tables")
	})
	cfg := Config{Name: "waittest", Stdout: io.Discard, Services: noServices}

	db.Cut()
	broker.Cut()
	quick := s
	quick.StartWait = 0
	began := time.Now()
	_, err := Open(t.Context(), cfg, quick)
	require.Error(t, err, "-start-wait 0 fails at the first refusal")
	assert.Less(t, time.Since(began), 5*time.Second)
	assert.Contains(t, err.Error(), "check -db")

	healed := make(chan struct{})
	go func() {
		defer close(healed)
		time.Sleep(time.Second) // the servers come up while the node waits
		db.Heal()
		time.Sleep(time.Second)
		broker.Heal()
	}()
	began = time.Now()
	n, err := Open(t.Context(), cfg, s)
	took := time.Since(began)
	<-healed
	require.NoError(t, err)
	require.NoError(t, n.Close())
	t.Logf("opened %s after the start, once both answered", took.Round(time.Millisecond))
	assert.GreaterOrEqual(t, took, 2*time.Second, "not before the broker answered")
	assert.Less(t, took, 10*time.Second, "soon after the broker answered")
}

// TestStartWaitGivesUp: a broker that never answers fails the start once
// -start-wait has passed, saying how often it tried; a refused login
// fails at once, however long the wait.
func TestStartWaitGivesUp(t *testing.T) {
	amqpURL := testenv.AMQPURL(t)
	broker, busURL := proxy.NewURL(t, amqpURL)
	broker.Cut()
	cfg := Config{Name: "waittest", Stdout: io.Discard, Services: noServices}
	s := Settings{Bus: busURL, DB: "sqlite:" + t.TempDir() + "/node.db", Prefix: "nodekit-wait-" + message.NewUUID()[:8], StartWait: 2 * time.Second}
	began := time.Now()
	_, err := Open(t.Context(), cfg, s)
	took := time.Since(began)
	require.Error(t, err)
	assert.ErrorIs(t, err, message.ErrUnavailable)
	assert.Contains(t, err.Error(), "-start-wait")
	assert.Contains(t, err.Error(), "check -bus")
	assert.Less(t, took, 5*time.Second, "gave up near -start-wait")

	wrong := strings.Replace(amqpURL, "guest:guest@", "guest:wrong-password@", 1)
	require.NotEqual(t, amqpURL, wrong, "the URL has guest:guest")
	s.Bus, s.StartWait = wrong, time.Minute
	began = time.Now()
	_, err = Open(t.Context(), cfg, s)
	require.Error(t, err)
	assert.ErrorIs(t, err, amqpbus.ErrAccessRefused)
	assert.NotContains(t, err.Error(), "wrong-password", "the password is masked")
	assert.Less(t, time.Since(began), 10*time.Second, "a refused login is not waited on")
}

func TestDBTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("ping: %w", io.ErrUnexpectedEOF), true},
		{sqlStateError("57P03"), true}, // the server is starting
		{sqlStateError("08006"), true},
		{sqlStateError("28P01"), false}, // password authentication failed
		{sqlStateError("3D000"), false}, // no such database
		{errors.New("unable to open database file"), false},
	} {
		assert.Equal(t, c.want, dbTransient(c.err), "%v", c.err)
	}
}

// sqlStateError is an error with a SQLSTATE, as pgconn.PgError.
type sqlStateError string

func (e sqlStateError) Error() string    { return "SQLSTATE " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }
