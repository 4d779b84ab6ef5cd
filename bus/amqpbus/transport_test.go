package amqpbus_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testQueue(t *testing.T) string {
	return fmt.Sprintf("amqpbus-test-%s.message.q.%s", strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-"), message.NewUUID()[:8])
}

func TestNoRouteUnderASecond(t *testing.T) {
	e := newEnv(t)
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{})
	for range 5 {
		start := time.Now()
		err := tr.Publish(t.Context(), testQueue(t), []byte("x"))
		took := time.Since(start)
		require.ErrorIs(t, err, message.ErrNoRoute)
		assert.Less(t, took, time.Second, "no-route must come back within a second, not as a timeout")
		t.Logf("no-route reported after %s", took)
	}
	// The channel survives a return: a routable publish still works.
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	require.NoError(t, tr.Publish(t.Context(), q, []byte("x")))
}

func TestPublishHonoursDeadlineWhenBrokerStalls(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	e := &env{url: u, links: map[string][]*link{}}
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{Heartbeat: time.Minute})
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	p.Stall()
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	err := tr.Publish(ctx, q, []byte("stuck"))
	took := time.Since(start)
	assert.ErrorIs(t, err, message.ErrTimeout, "a stalled broker must not hold the caller past its deadline")
	assert.Less(t, took, deadline+500*time.Millisecond)
	t.Logf("publish to a stalled broker returned after %s (deadline %s): %v", took, deadline, err)
	ctx2, cancel2 := context.WithTimeout(t.Context(), deadline)
	defer cancel2()
	assert.Error(t, tr.DeclareQueue(ctx2, q+"-2", driver.QueueOptions{Kind: driver.QueueTemporary}), "declarations honour ctx too")
	p.Heal()
}

// TestConsumeHonoursDeadlineWhenBrokerStalls: Consume returns by its
// ctx's deadline when the broker stopped answering (a frozen broker node,
// a quorum queue without a leader), as every blocking method of the
// transport contract must; the consumer it gave up on never delivers.
func TestConsumeHonoursDeadlineWhenBrokerStalls(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	e := &env{url: u, links: map[string][]*link{}}
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{Heartbeat: time.Minute, ProbeInterval: time.Hour})
	// Durable: a temporary queue is deleted with its last consumer, which
	// the one given up on may be for a moment once the broker answers.
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
	t.Cleanup(func() { _ = tr.DeleteQueue(context.Background(), q) })
	p.Stall()
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	c, err := tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) {
		t.Errorf("a consumer given up on delivered %q", d.Body())
	})
	took := time.Since(start)
	assert.Nil(t, c)
	assert.ErrorIs(t, err, message.ErrTimeout, "a stalled broker must not hold Consume past its deadline")
	assert.Less(t, took, deadline+500*time.Millisecond)
	t.Logf("Consume on a stalled broker returned after %s (deadline %s): %v", took, deadline, err)
	p.Heal()
	// The message goes to a new consumer: the one given up on is gone
	// (were it not, it would fail the test, or take the message).
	roundTrip(t, tr, q, "after the heal", "the new consumer got nothing: a consumer given up on took the message")
}

// roundTrip consumes queue on tr, publishes body to it and requires the
// consumer to receive it within 5 s (else fails with why).
func roundTrip(t *testing.T, tr *amqpbus.Transport, queue, body, why string) {
	t.Helper()
	got := make(chan string, 1)
	c, err := tr.Consume(t.Context(), queue, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) {
		got <- string(d.Body())
		_ = d.Ack()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Cancel() })
	require.NoError(t, tr.Publish(t.Context(), queue, []byte(body)))
	select {
	case b := <-got:
		assert.Equal(t, body, b)
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
}

// TestCloseWhileReconnecting: Close ends at once while the transport
// reconnects to a broker that accepts connections but never answers (a
// frozen broker node): the attempt under way is cut short, not left to
// its DialTimeout.
func TestCloseWhileReconnecting(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	tr, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: u, DialTimeout: 20 * time.Second})
	require.NoError(t, err)
	p.Stall()
	defer p.Heal()
	deadline := time.Now().Add(10 * time.Second)
	for tr.State() != driver.TransportReconnecting {
		require.True(t, time.Now().Before(deadline), "the probe never noticed the stalled broker")
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // into an attempt: its TCP connect succeeds, its handshake gets no answer
	start := time.Now()
	require.NoError(t, tr.Close())
	took := time.Since(start)
	t.Logf("Close while reconnecting to a stalled broker returned after %s (DialTimeout 20s)", took)
	assert.Less(t, took, 3*time.Second, "Close must not wait for the reconnect attempt's DialTimeout")
}

func TestMaxMessageSize(t *testing.T) {
	e := newEnv(t)
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{MaxMessageSize: 1024})
	err := tr.Publish(t.Context(), testQueue(t), make([]byte, 2048))
	assert.ErrorIs(t, err, message.ErrTooLarge)
	assert.Contains(t, err.Error(), "exceeds MaxMessageSize 1024")
}

func TestQueueArgumentsMustAgree(t *testing.T) {
	e := newEnv(t)
	a := e.dial(t, message.NewUUID(), amqpbus.Config{})
	b := e.dial(t, message.NewUUID(), amqpbus.Config{QueueExpires: time.Hour})
	q := testQueue(t)
	require.NoError(t, a.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
	t.Cleanup(func() { _ = a.DeleteQueue(context.Background(), q) })
	err := b.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable})
	assert.ErrorIs(t, err, message.ErrBadRequest)
	assert.Contains(t, err.Error(), "other settings")
	// The control channel recovers from the channel error.
	require.NoError(t, b.DeclareQueue(t.Context(), q+"-ok", driver.QueueOptions{Kind: driver.QueueTemporary}))
	require.NoError(t, a.DeleteQueue(t.Context(), q+"-does-not-exist"), "deleting a missing queue is not an error")
}

// TestTemporaryNameHeldElsewhere: a temporary queue whose name another
// connection still holds (a process of the same node that died a moment
// ago, its connection not yet dropped by the broker) is declared under a
// new name, which Address gives and publishes reach.
func TestTemporaryNameHeldElsewhere(t *testing.T) {
	e := newEnv(t)
	node := message.NewUUID()
	old := e.dial(t, node, amqpbus.Config{})
	q := testQueue(t)
	require.NoError(t, old.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	fresh := e.dial(t, node, amqpbus.Config{})
	require.NoError(t, fresh.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}),
		"a name another connection holds is no reason to fail")
	addr := fresh.Address(q)
	assert.NotEqual(t, q, addr, "a new name on the broker")
	assert.True(t, strings.HasPrefix(addr, q+"."), "the new name extends the old: %s", addr)
	roundTrip(t, fresh, q, "to the new name", "the queue under its new name received nothing")
}

func TestMaskURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://bob:s3cret@host:5672/vh": "amqp://bob:xxxxx@host:5672/vh",
		"amqps://bob@host/":              "amqps://bob@host/",
		"amqp://127.0.0.1:5672/":         "amqp://127.0.0.1:5672/",
		"not a url at all with s3cret 😀": "(unparsable URL)",
	} {
		assert.Equal(t, want, amqpbus.MaskURL(in))
	}
	_, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: "http://bob:s3cret@host/"})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cret")
}

// TestCredentialsNeverLogged uses a non-default user whose password must
// appear nowhere: not in logs, not in errors (failed logins included).
func TestCredentialsNeverLogged(t *testing.T) {
	base := testenv.AMQPURL(t)
	const user, password = "cloudbus_test_user", "Pw-8f3a1c-never-printed"
	rabbitmqctl(t, "add_user", user, password)
	t.Cleanup(func() { rabbitmqctlQuiet("delete_user", user) })
	rabbitmqctl(t, "set_permissions", "-p", "/", user, ".*", ".*", ".*")

	u, err := url.Parse(base)
	require.NoError(t, err)
	u.User = url.UserPassword(user, password)
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))

	tr, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: u.String(), Logger: logger})
	require.NoError(t, err, "dial as %s", user)
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	require.NoError(t, tr.Publish(t.Context(), q, []byte("hello")))
	errs := []error{tr.Publish(t.Context(), testQueue(t), []byte("no route"))}
	require.NoError(t, tr.Close())

	bad := *u
	bad.User = url.UserPassword(user, password+"-wrong")
	_, err = amqpbus.Dial(t.Context(), amqpbus.Config{URL: bad.String(), Logger: logger})
	errs = append(errs, err)
	closed := *u
	closed.Host = "127.0.0.1:1"
	_, err = amqpbus.Dial(t.Context(), amqpbus.Config{URL: closed.String(), Logger: logger, DialTimeout: time.Second})
	errs = append(errs, err)

	for _, err := range errs {
		require.Error(t, err)
		assert.NotContains(t, err.Error(), password, "an error leaked the password")
		t.Logf("error (password masked): %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.NotContains(t, logs.String(), password, "the logs leaked the password")
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// rabbitmqctl runs the broker's admin tool; without it the test skips,
// or fails under CI.
func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	path, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("rabbitmqctl not found; CI needs it to create a test user")
		}
		t.Skip("rabbitmqctl not found: it creates the non-default user this test needs")
	}
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "already exists") {
		t.Fatalf("rabbitmqctl %s: %v: %s", args[0], err, out)
	}
}

func rabbitmqctlQuiet(args ...string) {
	if path, err := exec.LookPath("rabbitmqctl"); err == nil {
		_ = exec.Command(path, args...).Run()
	}
}

// TestTLS connects with amqps:// and a custom tls.Config through a TLS
// listener the test sets up in front of the broker.
func TestTLS(t *testing.T) {
	base, err := url.Parse(testenv.AMQPURL(t))
	require.NoError(t, err)
	cert, pool := selfSigned(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", base.Host)
			if err != nil {
				_ = c.Close()
				continue
			}
			wg.Go(func() { copyClose(up, c) })
			wg.Go(func() { copyClose(c, up) })
		}
	})
	u := *base
	u.Scheme = "amqps"
	u.Host = ln.Addr().String()

	_, err = amqpbus.Dial(t.Context(), amqpbus.Config{URL: u.String(), DialTimeout: 2 * time.Second})
	require.Error(t, err, "an untrusted certificate must be refused")

	tr, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: u.String(), TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	require.NoError(t, err)
	defer tr.Close()
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	got := make(chan string, 1)
	_, err = tr.Consume(t.Context(), q, driver.ConsumeOptions{}, func(d driver.Delivery) { got <- string(d.Body()); _ = d.Ack() })
	require.NoError(t, err)
	require.NoError(t, tr.Publish(t.Context(), q, []byte("over tls")))
	select {
	case s := <-got:
		assert.Equal(t, "over tls", s)
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery over TLS")
	}
}

func copyClose(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "cloudbus test broker"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestCloseReturnsWhenBrokerStalls: Close ends by its own bound when the
// broker stopped answering (a frozen broker node): it cancels nothing
// consumer by consumer on the broker, whose answers would never come,
// and cuts the connection when the close handshake goes unanswered.
func TestCloseReturnsWhenBrokerStalls(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	e := &env{url: u, links: map[string][]*link{}}
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{Heartbeat: time.Minute})
	for range 3 {
		q := testQueue(t)
		require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
		_, err := tr.Consume(t.Context(), q, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) { _ = d.Ack() })
		require.NoError(t, err)
	}
	p.Stall()
	start := time.Now()
	require.NoError(t, tr.Close())
	took := time.Since(start)
	t.Logf("Close with 3 consumers and a stalled broker returned after %s", took)
	assert.Less(t, took, 5*time.Second, "Close must not wait for a broker that does not answer")
	p.Heal()
}
