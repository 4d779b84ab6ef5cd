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

// roundTrip times one echo of a byte on c.
func roundTrip(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	echo(t, c, "r")
	return time.Since(start)
}

// minRoundTrip is the fastest of n round trips on c: the machine's
// scheduling only ever adds to a round trip.
func minRoundTrip(t *testing.T, c net.Conn, n int) time.Duration {
	t.Helper()
	best := time.Duration(1<<63 - 1)
	for range n {
		best = min(best, roundTrip(t, c))
	}
	return best
}

func TestLatencyDelaysRoundTripsUntilHeal(t *testing.T) {
	const delay = 40 * time.Millisecond
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	plain := minRoundTrip(t, c, 5)
	assert.Less(t, plain, delay/2, "a round trip without latency is fast")

	p.SetLatency(Latency{Delay: delay}, Latency{Delay: delay})
	slow := minRoundTrip(t, c, 5)
	assert.GreaterOrEqual(t, slow, 2*delay, "a round trip gains both directions' delays")
	assert.Less(t, slow, 2*delay+100*time.Millisecond, "and not much more")
	fresh := connect(t, p)
	assert.GreaterOrEqual(t, roundTrip(t, fresh), 2*delay, "a new connection is delayed too")

	p.SetLatency(Latency{Delay: delay}, Latency{})
	oneWay := minRoundTrip(t, c, 5)
	assert.GreaterOrEqual(t, oneWay, delay, "each direction has its own latency")
	assert.Less(t, oneWay, 2*delay, "the replies are not delayed")

	p.Heal()
	assert.Less(t, minRoundTrip(t, c, 5), delay/2, "Heal removes the latency")
	p.SetLatency(Latency{Delay: delay}, Latency{Delay: delay})
	require.GreaterOrEqual(t, minRoundTrip(t, c, 3), 2*delay)
	p.SetLatency(Latency{}, Latency{})
	assert.Less(t, minRoundTrip(t, c, 5), delay/2, "zero latencies remove it")
}

func TestLatencyJitterBounds(t *testing.T) {
	const delay, jitter = 20 * time.Millisecond, 30 * time.Millisecond
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	p.SetLatency(Latency{Delay: delay, Jitter: jitter}, Latency{Delay: delay, Jitter: jitter})
	lo, hi := time.Duration(1<<63-1), time.Duration(0)
	for range 20 {
		rt := roundTrip(t, c)
		lo, hi = min(lo, rt), max(hi, rt)
	}
	assert.GreaterOrEqual(t, lo, 2*delay, "no round trip is faster than both delays")
	assert.Greater(t, hi-lo, jitter/4, "the jitter varies the round trips (fastest %s, slowest %s)", lo, hi)
}

// TestLatencyIsADelayLine: writes in flight are held together, not one
// after the other, so 50 pipelined echoes at 100 ms per round trip take
// about 100 ms, not 5 s.
func TestLatencyIsADelayLine(t *testing.T) {
	const delay, n = 50 * time.Millisecond, 50
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	echo(t, c, "warm")
	p.SetLatency(Latency{Delay: delay}, Latency{Delay: delay})
	require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
	start := time.Now()
	got := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(c, make([]byte, n))
		got <- err
	}()
	for range n {
		_, err := c.Write([]byte("x"))
		require.NoError(t, err)
		time.Sleep(time.Millisecond) // separate reads at the proxy, not one coalesced write
	}
	require.NoError(t, <-got)
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, 2*delay)
	assert.Less(t, took, time.Second, "pipelined round trips overlap (%s for %d; one after the other would take %s)", took, n, n*2*delay)
}

// TestLatencyKeepsOrder: with a jitter much larger than the gap between
// writes, every byte still arrives, in order, on every connection.
func TestLatencyKeepsOrder(t *testing.T) {
	const writes, conns = 2000, 4
	p := start(t, echoServer(t), nil)
	p.SetLatency(Latency{Delay: time.Millisecond, Jitter: 20 * time.Millisecond}, Latency{Jitter: 20 * time.Millisecond})
	var wg sync.WaitGroup
	for i := range conns {
		c := connect(t, p)
		require.NoError(t, c.SetDeadline(time.Now().Add(4*wait)))
		want := make([]byte, 0, writes*5)
		for j := range writes {
			want = fmt.Appendf(want, "%04d|", (i*writes+j)%10000)
		}
		wg.Go(func() {
			for j := 0; j < len(want); j += 5 {
				if _, err := c.Write(want[j : j+5]); err != nil {
					t.Errorf("write: %v", err)
					return
				}
			}
		})
		got := make([]byte, len(want))
		_, err := io.ReadFull(c, got)
		require.NoError(t, err, "connection %d: every byte arrives", i)
		require.Equal(t, string(want), string(got), "connection %d: bytes keep their order", i)
	}
	wg.Wait()
}

func TestLatencyPassesFINAfterDelayedBytes(t *testing.T) {
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	p.SetLatency(Latency{Delay: 30 * time.Millisecond}, Latency{Delay: 30 * time.Millisecond})
	require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
	_, err := c.Write([]byte("last words"))
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	rest, err := io.ReadAll(c)
	require.NoError(t, err, "the FIN follows the delayed bytes as a clean close")
	assert.Equal(t, "last words", string(rest))
}

func TestCutResetsDelayedConnections(t *testing.T) {
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	echo(t, c, "x")
	p.SetLatency(Latency{Delay: time.Minute}, Latency{})
	_, err := c.Write([]byte("held a minute"))
	require.NoError(t, err)
	p.Cut() // ends the delay line holding the bytes; goleak checks it
	requireReset(t, c, "delayed, then cut")
}

func TestStallHoldsDelayedBytes(t *testing.T) {
	p := start(t, echoServer(t), nil)
	c := connect(t, p)
	p.SetLatency(Latency{Delay: 10 * time.Millisecond}, Latency{Delay: 10 * time.Millisecond})
	echo(t, c, "before")
	p.Stall()
	_, err := c.Write([]byte("held"))
	require.NoError(t, err)
	// Nothing may come back while stalled; this bounded read is the
	// assertion itself, not a synchronisation.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	n, err := c.Read(make([]byte, 16))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "no delayed bytes flow while stalled (got %d)", n)
	p.Heal()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err, "held bytes flow after Heal")
	assert.Equal(t, "held", string(buf))
}
