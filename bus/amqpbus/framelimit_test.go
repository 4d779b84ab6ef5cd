package amqpbus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
)

// testFrame is one AMQP frame of a synthetic stream.
type testFrame struct {
	typ     byte
	ch      uint16
	payload []byte
}

func (f testFrame) append(b []byte) []byte {
	b = append(b, f.typ)
	b = binary.BigEndian.AppendUint16(b, f.ch)
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.payload)))
	b = append(b, f.payload...)
	return append(b, frameEnd)
}

func contentHeader(ch uint16, size uint64) testFrame {
	p := []byte{0, 60, 0, 0}
	p = binary.BigEndian.AppendUint64(p, size)
	p = append(p, 0x10, 0, 0x05, 'h', 'e', 'l', 'l', 'o') // some properties
	return testFrame{frameHeader, ch, p}
}

func parseFrames(t testing.TB, b []byte) []testFrame {
	t.Helper()
	var out []testFrame
	for len(b) > 0 {
		if len(b) < frameHeaderLen+1 {
			t.Fatalf("truncated frame: % x", b)
		}
		n := int(binary.BigEndian.Uint32(b[3:7]))
		if len(b) < frameHeaderLen+n+1 || b[frameHeaderLen+n] != frameEnd {
			t.Fatalf("bad frame of %d bytes (have %d)", n, len(b))
		}
		out = append(out, testFrame{b[0], binary.BigEndian.Uint16(b[1:3]), bytes.Clone(b[frameHeaderLen : frameHeaderLen+n])})
		b = b[frameHeaderLen+n+1:]
	}
	return out
}

// streamConn is a net.Conn whose reads come from a reader, in pieces of
// random size.
type streamConn struct {
	net.Conn
	r   io.Reader
	rnd *rand.Rand
}

func (c *streamConn) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1+c.rnd.IntN(len(p))]
	}
	return c.r.Read(p)
}

// readAll reads the limited stream in pieces of random size, as amqp091's
// buffered reader might.
func readAll(t testing.TB, in []byte, limit int, seed uint64) []byte {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 1))
	c := newLimitConn(&streamConn{r: bytes.NewReader(in), rnd: rnd}, limit)
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf[:1+rnd.IntN(len(buf))])
		out = append(out, buf[:n]...)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
	}
}

// checkLimited checks out against in: every frame but the body frames of
// a message longer than limit is unchanged; such a message's content
// header announces limit+1 bytes and its body frames carry exactly its
// first limit+1 bytes.
func checkLimited(t testing.TB, in, out []byte, limit int) {
	t.Helper()
	want := limitFrames(parseFrames(t, in), limit)
	got := parseFrames(t, out)
	require.Equal(t, len(want), len(got), "frame count")
	for i := range want {
		require.Equal(t, want[i], got[i], "frame %d", i)
	}
}

// limitFrames is the reference: what limitConn must make of frames.
func limitFrames(in []testFrame, limit int) []testFrame {
	type cut struct{ left, keep uint64 }
	cuts := map[uint16]*cut{}
	var out []testFrame
	for _, f := range in {
		switch {
		case f.typ == frameHeader && len(f.payload) >= contentPrefixLen:
			delete(cuts, f.ch)
			p := bytes.Clone(f.payload)
			if n := binary.BigEndian.Uint64(p[4:12]); n > uint64(limit) {
				binary.BigEndian.PutUint64(p[4:12], uint64(limit)+1)
				cuts[f.ch] = &cut{n, uint64(limit) + 1}
			}
			out = append(out, testFrame{f.typ, f.ch, p})
		case f.typ == frameBody && cuts[f.ch] != nil:
			c := cuts[f.ch]
			n := uint64(len(f.payload))
			if k := min(n, c.keep); k > 0 {
				out = append(out, testFrame{f.typ, f.ch, f.payload[:k]})
				c.keep -= k
			}
			if n >= c.left {
				delete(cuts, f.ch)
			} else {
				c.left -= n
			}
		default:
			if f.typ != frameBody {
				delete(cuts, f.ch)
			}
			out = append(out, f)
		}
	}
	return out
}

// message returns the frames of one delivery on ch: a method, a content
// header and the body in frames of at most frameMax bytes.
func deliveryFrames(ch uint16, body []byte, frameMax int) []testFrame {
	fs := []testFrame{{1, ch, []byte{0, 60, 0, 60, 1, 'x'}}, contentHeader(ch, uint64(len(body)))}
	for len(body) > 0 {
		n := min(len(body), frameMax)
		fs = append(fs, testFrame{frameBody, ch, body[:n]})
		body = body[n:]
	}
	return fs
}

func encodeFrames(fs []testFrame) []byte {
	var b []byte
	for _, f := range fs {
		b = f.append(b)
	}
	return b
}

func TestLimitConnCutsLongBodies(t *testing.T) {
	body := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}
	const limit = 1000
	var fs []testFrame
	fs = append(fs, deliveryFrames(1, body(limit), 300)...)     // at the limit: untouched
	fs = append(fs, deliveryFrames(1, body(limit+1), 300)...)   // one over: announced as is
	fs = append(fs, testFrame{8, 0, nil})                       // a heartbeat
	fs = append(fs, deliveryFrames(2, body(50_000), 4096)...)   // cut in the first frame
	fs = append(fs, deliveryFrames(1, body(5), 300)...)         // small, after
	fs = append(fs, deliveryFrames(3, body(limit+350), 700)...) // cut in the second frame
	fs = append(fs, deliveryFrames(1, nil, 300)...)             // empty body
	in := encodeFrames(fs)
	for seed := range uint64(20) {
		out := readAll(t, in, limit, seed)
		checkLimited(t, in, out, limit)
	}
	out := readAll(t, in, limit, 1)
	require.Less(t, len(out), len(in)-45_000, "the long body was discarded")

	// Interleaved channels: a cut on one leaves the other alone.
	a, b := deliveryFrames(1, body(5000), 512), deliveryFrames(2, body(3000), 512)
	var mixed []testFrame
	for i := 0; i < max(len(a), len(b)); i++ {
		if i < len(a) {
			mixed = append(mixed, a[i])
		}
		if i < len(b) {
			mixed = append(mixed, b[i])
		}
	}
	in = encodeFrames(mixed)
	checkLimited(t, in, readAll(t, in, 4000, 7), 4000)
}

func TestLimitConnPassesAProtocolHeader(t *testing.T) {
	in := []byte("AMQP\x00\x00\x09\x01")
	require.Equal(t, in, readAll(t, in, 10, 1))
}

// FuzzLimitConn: for any stream of well-formed frames, whatever the sizes,
// channels and read sizes, limitConn's output is the reference's.
func FuzzLimitConn(f *testing.F) {
	f.Add(uint16(100), []byte{1, 50, 2, 150, 1, 0, 3, 255}, uint64(1))
	f.Add(uint16(1), []byte{1, 0, 1, 1, 1, 2, 2, 2}, uint64(2))
	f.Fuzz(func(t *testing.T, limit uint16, plan []byte, seed uint64) {
		// plan: pairs (channel, size/4); size in bytes, frames of 64.
		var fs []testFrame
		for i := 0; i+1 < len(plan) && len(fs) < 200; i += 2 {
			ch, n := uint16(plan[i]%4), int(plan[i+1])*4
			switch plan[i] % 8 {
			case 7:
				fs = append(fs, testFrame{8, 0, nil})
			case 6: // a content header without its body: interrupted by what follows
				fs = append(fs, contentHeader(ch, uint64(n)))
			default:
				fs = append(fs, deliveryFrames(ch, bytes.Repeat([]byte{plan[i+1]}, n), 64)...)
			}
		}
		in := encodeFrames(fs)
		checkLimited(t, in, readAll(t, in, int(limit), seed), int(limit))
	})
}

// TestLongBodiesAreCutBeforeTheyAreRead: a body longer than MaxMessageSize
// that the broker accepts (its max_message_size is broker-wide) reaches
// the consumer cut to MaxMessageSize+1 bytes, and the node never holds
// the rest: consuming a 24 MiB body allocates a fraction of it. The
// messages around it arrive whole.
func TestLongBodiesAreCutBeforeTheyAreRead(t *testing.T) {
	url := testenv.AMQPURL(t)
	const limit = 1 << 20
	tr, err := Dial(t.Context(), Config{URL: url, MaxMessageSize: limit, ConnectionName: "cloudbus-test-limit"})
	require.NoError(t, err)
	defer tr.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	q := fmt.Sprintf("amqpbus-test-limit.message.q.%d", rand.Uint32())
	require.NoError(t, tr.DeclareQueue(ctx, q, driver.QueueOptions{Kind: driver.QueueTemporary}))

	// Published by a plain client: the transport itself never sends more
	// than its limit.
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	long := bytes.Repeat([]byte("x"), 24<<20)
	for _, body := range [][]byte{[]byte("before"), long, []byte("after")} {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: body})
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the broker accepted a %d-byte body", len(body))
	}
	long = nil //nolint:ineffassign // let the collector have it before measuring
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)

	got := make(chan []byte, 3)
	_, err = tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 3}, func(d driver.Delivery) {
		got <- bytes.Clone(d.Body()[:min(len(d.Body()), 16)])
		got <- []byte(strconv.Itoa(len(d.Body())))
		_ = d.Ack()
	})
	require.NoError(t, err)
	var lens []string
	for range 3 {
		select {
		case <-got:
			lens = append(lens, string(<-got))
		case <-ctx.Done():
			t.Fatalf("only %d of 3 deliveries: %v", len(lens), lens)
		}
	}
	runtime.ReadMemStats(&after)
	assert.Equal(t, []string{"6", strconv.Itoa(limit + 1), "5"}, lens, "body lengths delivered")
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("consuming a 24 MiB body with a 1 MiB limit allocated %.1f MiB", float64(alloc)/(1<<20))
	assert.Less(t, alloc, uint64(8<<20), "the node read the long body whole")
	assert.Equal(t, driver.TransportConnected, tr.State())
}

// slowConn reads at most 16 KiB every 8 ms: about 2 MB/s from the broker.
type slowConn struct{ net.Conn }

func (c slowConn) Read(p []byte) (int, error) {
	time.Sleep(8 * time.Millisecond)
	return c.Conn.Read(p[:min(len(p), 16<<10)])
}

// TestProbeQueuedBehindALongBodyKeepsTheLink: the liveness probe's
// answer waits behind a body the broker is still sending (here 3 MiB at
// about 2 MB/s, with a probe timeout of 200 ms); bytes arriving prove the
// link alive, so the transport keeps its connection.
func TestProbeQueuedBehindALongBodyKeepsTheLink(t *testing.T) {
	url := testenv.AMQPURL(t)
	tr, err := Dial(t.Context(), Config{URL: url, ConnectionName: "cloudbus-test-slow", ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, 5*time.Second)
			if err != nil {
				return nil, err
			}
			return slowConn{c}, nil
		}})
	require.NoError(t, err)
	defer tr.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	q := fmt.Sprintf("amqpbus-test-slow.message.q.%d", rand.Uint32())
	require.NoError(t, tr.DeclareQueue(ctx, q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	got := make(chan int, 1)
	_, err = tr.Consume(ctx, q, driver.ConsumeOptions{}, func(d driver.Delivery) { got <- len(d.Body()); _ = d.Ack() })
	require.NoError(t, err)

	body := bytes.Repeat([]byte("y"), 3<<20)
	start := time.Now()
	require.NoError(t, tr.Publish(ctx, q, body))
	select {
	case n := <-got:
		t.Logf("a %d-byte body arrived in %s at about 2 MB/s", n, time.Since(start).Round(time.Millisecond))
		assert.Equal(t, len(body), n)
	case <-ctx.Done():
		t.Fatal("the body never arrived")
	}
	assert.Zero(t, tr.ConnectionsLost(), "the probe, queued behind the body, cost the connection")
	assert.Equal(t, driver.TransportConnected, tr.State())
}
