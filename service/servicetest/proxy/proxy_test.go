package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every read that is expected to return: a generous deadline,
// never a pause.
const wait = 5 * time.Second

// echoServer starts a TCP server that echoes what it reads and closes a
// connection after its client's FIN; it stops when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(c, c)
				_ = c.Close()
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// start starts a proxy to target with dial (nil: the real dialer),
// closed when the test ends.
func start(t *testing.T, target string, dial dialFunc) *Proxy {
	t.Helper()
	p, err := listen(target, dial)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// countingDial is the real dialer, counting its calls.
func countingDial(n *atomic.Int32) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
}

func connect(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), wait)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// echo writes msg on c and requires it back.
func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
	_, err := c.Write([]byte(msg))
	require.NoError(t, err)
	buf := make([]byte, len(msg))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err, "the proxy forwards both ways")
	assert.Equal(t, msg, string(buf))
}

// requireReset requires that c was reset by the proxy: a read fails with
// ECONNRESET, well before the deadline.
func requireReset(t *testing.T, c net.Conn, why string) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
	n, err := c.Read(make([]byte, 16))
	require.Error(t, err, "%s: the connection must be reset, yet %d bytes came through", why, n)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "%s: the connection must be reset, not left open", why)
	assert.ErrorIs(t, err, syscall.ECONNRESET, "%s: a reset (RST), not a clean close (FIN)", why)
}

// requireNewReset opens a connection through p and requires that the
// proxy resets it: at connect, if the RST wins the handshake, or at the
// first read.
func requireNewReset(t *testing.T, p *Proxy, why string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), wait)
	if err != nil {
		require.ErrorIs(t, err, syscall.ECONNRESET, "%s: connecting may fail only with a reset", why)
		return
	}
	t.Cleanup(func() { _ = c.Close() })
	requireReset(t, c, why)
}

func TestForwardsAndPassesFIN(t *testing.T) {
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	echo(t, c, "hello")
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	rest, err := io.ReadAll(c)
	require.NoError(t, err, "a clean close on one side reaches the other as a clean close (EOF), not a reset")
	assert.Empty(t, rest)
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pairs) == 0
	}, wait, time.Millisecond, "the proxy forgets a pair closed on both sides")
}

func TestCutResetsEstablishedConnections(t *testing.T) {
	p := start(t, echoServer(t), nil)
	a, b := connect(t, p), connect(t, p)
	echo(t, a, "a")
	echo(t, b, "b")
	p.Cut()
	requireReset(t, a, "established before Cut")
	requireReset(t, b, "established before Cut")
}

func TestCutRefusesNewConnectionsUntilHeal(t *testing.T) {
	var dials atomic.Int32
	p := start(t, echoServer(t), countingDial(&dials))
	old := connect(t, p)
	echo(t, old, "x")
	require.EqualValues(t, 1, dials.Load())

	p.Cut()
	requireNewReset(t, p, "opened after Cut")
	assert.EqualValues(t, 1, dials.Load(), "a connection opened while cut never reaches the target")

	p.Heal()
	echo(t, connect(t, p), "healed")
	assert.EqualValues(t, 2, dials.Load())
	requireReset(t, old, "reset by Cut; Heal does not revive it")
}

// TestCutDuringUpstreamDial is the race a Cut must win: the proxy has
// accepted a connection and is still dialing the target when Cut comes;
// the dial then completes. The connection must be reset, even if Heal
// came before the dial completed, never forwarded.
func TestCutDuringUpstreamDial(t *testing.T) {
	for _, tc := range []struct {
		name        string
		during      func(p *Proxy)
		wantForward bool
	}{
		{"no fault: the slow dial completes and forwards", func(*Proxy) {}, true},
		{"Cut while dialing", (*Proxy).Cut, false},
		{"Cut and Heal while dialing", func(p *Proxy) { p.Cut(); p.Heal() }, false},
		{"Stall and Heal while dialing", func(p *Proxy) { p.Stall(); p.Heal() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := echoServer(t)
			dialing := make(chan struct{})
			release := make(chan struct{})
			p := start(t, target, func(ctx context.Context, network, addr string) (net.Conn, error) {
				close(dialing) // one connection per subtest
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			})
			c := connect(t, p)
			select {
			case <-dialing:
			case <-time.After(wait):
				t.Fatal("the proxy did not dial the target for an accepted connection")
			}
			tc.during(p)
			close(release)
			if tc.wantForward {
				echo(t, c, "through")
				return
			}
			requireReset(t, c, "accepted before Cut, dial completed after it")
			p.mu.Lock()
			defer p.mu.Unlock()
			assert.Empty(t, p.pairs, "the proxy keeps no pair from before the Cut")
		})
	}
}

func TestStallStopsBytesUntilHeal(t *testing.T) {
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	echo(t, c, "before")

	p.Stall()
	_, err := c.Write([]byte("held"))
	require.NoError(t, err, "a stalled proxy keeps the socket open")
	// Nothing may come back while stalled; this bounded read is the
	// assertion itself, not a synchronisation.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	n, err := c.Read(make([]byte, 16))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "no bytes flow while stalled (got %d)", n)

	p.Heal()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err, "held bytes flow after Heal")
	assert.Equal(t, "held", string(buf))
	echo(t, c, "after")
}

func TestCutWhileStalledResets(t *testing.T) {
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	echo(t, c, "x")
	p.Stall()
	_, err := c.Write([]byte("held"))
	require.NoError(t, err)
	p.Cut() // wakes the pipe blocked on the stall; goleak checks it ended
	requireReset(t, c, "stalled, then cut")
	p.Heal()
}

func TestDialFailureResetsClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	p := start(t, dead, nil)
	requireNewReset(t, p, "the target refused the proxy")
}

func TestCloseResetsAndIsIdempotent(t *testing.T) {
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	echo(t, c, "x")
	p.Close()
	requireReset(t, c, "open when the proxy closed")
	p.Close()
	_, err := net.DialTimeout("tcp", p.Addr(), wait)
	assert.Error(t, err, "a closed proxy no longer listens")
}

func TestListenRejectsTargetWithoutPort(t *testing.T) {
	_, err := Listen("localhost")
	assert.ErrorContains(t, err, `target "localhost"`)
}

func TestNewURL(t *testing.T) {
	target := echoServer(t)
	p, u := NewURL(t, "amqp://guest:secret@"+target+"/vhost?heartbeat=5")
	assert.Equal(t, "amqp://guest:secret@"+p.Addr()+"/vhost?heartbeat=5", u, "only the host changes")
	echo(t, connect(t, p), "x")

	for _, tc := range []struct{ url, want string }{
		{"amqp://guest:secret@rabbit/vhost", "names no port"},
		{"postgres:///db?password=secret", "has no host"},
		{"user:secret@tcp(db:3306)/app", "has no host"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			f := &fatalTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				NewURL(f, tc.url)
			}()
			<-done
			assert.Contains(t, f.msg, tc.want)
			assert.NotContains(t, f.msg, "secret", "a failure never prints the password")
		})
	}
}

// fatalTB records Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestRedact(t *testing.T) {
	assert.False(t, strings.Contains(redact("amqp://u:secret@h:1/"), "secret"))
	assert.Equal(t, "u:REDACTED", redact("u:secret@tcp(h:1)/x"))
	assert.Equal(t, "(unparsable URL)", redact("%zz"))
	assert.Equal(t, "postgres://u:xxxxx@h:1/db?REDACTED", redact("postgres://u:secret@h:1/db?password=secret"))
}
