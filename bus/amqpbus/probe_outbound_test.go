package amqpbus

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowWriteConn writes at most 16 KiB every 8 ms: about 2 MB/s to the
// broker, the bytes waiting in the process.
type slowWriteConn struct{ net.Conn }

func (c slowWriteConn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		time.Sleep(8 * time.Millisecond)
		k, err := c.Conn.Write(p[:min(len(p), 16<<10)])
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// slowLink starts a forwarder to addr that reads at most 16 KiB every
// 8 ms from the client (about 2 MB/s) and forwards the broker's bytes at
// once: the client's bytes wait in its kernel, as on a slow link. It
// returns the forwarder's address.
func slowLink(t *testing.T, addr string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, up) })
			wg.Go(func() {
				buf := make([]byte, 16<<10)
				for {
					time.Sleep(8 * time.Millisecond)
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := up.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// TestProbeQueuedBehindALongPublishKeepsTheLink: the liveness probe's
// frame waits behind a publish still on its way to the broker (3 MiB at
// about 2 MB/s, with a probe timeout of 200 ms), in the process's buffer
// or in the kernel's; bytes the broker keeps taking prove the link
// alive, so the transport keeps its connection and the publish is
// confirmed.
func TestProbeQueuedBehindALongPublishKeepsTheLink(t *testing.T) {
	url := testenv.AMQPURL(t)
	broker, err := hostPort(url)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		dial func(network, addr string) (net.Conn, error)
	}{
		{"slow writes in the process", func(network, addr string) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, 5*time.Second)
			if err != nil {
				return nil, err
			}
			return slowWriteConn{c}, nil
		}},
		{"slow link", func(network, _ string) (net.Conn, error) {
			return net.DialTimeout(network, slowLink(t, broker), 5*time.Second)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := Dial(t.Context(), Config{URL: url, ConnectionName: "cloudbus-test-slow", ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond, Dial: c.dial})
			require.NoError(t, err)
			defer tr.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			q := fmt.Sprintf("amqpbus-test-slow.message.q.%d", rand.Uint32())
			require.NoError(t, tr.DeclareQueue(ctx, q, driver.QueueOptions{Kind: driver.QueueTemporary}))
			body := bytes.Repeat([]byte("y"), 3<<20)
			start := time.Now()
			require.NoError(t, tr.Publish(ctx, q, body))
			t.Logf("a %d-byte publish was confirmed in %s at about 2 MB/s", len(body), time.Since(start).Round(time.Millisecond))
			assert.Zero(t, tr.ConnectionsLost(), "the probe, queued behind the publish, cost the connection")
			assert.Equal(t, driver.TransportConnected, tr.State())
		})
	}
}

// hostPort returns the host:port of an AMQP URL.
func hostPort(rawURL string) (string, error) {
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)), nil
}
