package amqpbus

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// socket is a net.Conn whose writes a test holds and fails.
type socket struct {
	net.Conn // nil: only what writeConn calls is implemented

	mu       sync.Mutex
	writes   [][]byte      // each Write's bytes, in order
	hold     chan struct{} // while open, a Write waits for it to close
	err      error         // what Write returns
	closed   bool
	deadline chan struct{} // closed when the write deadline passed
}

func newSocket() *socket { return &socket{deadline: make(chan struct{})} }

func (s *socket) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.writes = append(s.writes, bytes.Clone(p))
	hold, err, closed := s.hold, s.err, s.closed
	s.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	if hold != nil {
		select {
		case <-hold:
		case <-s.deadline:
			return 0, os.ErrDeadlineExceeded
		}
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *socket) Read(p []byte) (int, error) { return 0, io.EOF }

func (s *socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return net.ErrClosed
	}
	s.closed = true
	return nil
}

func (s *socket) SetWriteDeadline(t time.Time) error {
	time.AfterFunc(time.Until(t), func() { close(s.deadline) })
	return nil
}

func (s *socket) written() (calls int, all []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes), bytes.Join(s.writes, nil)
}

// TestWriteConnGathersWritesInOrder: writes made while the socket takes
// one all go out, in order, in the next single socket write.
func TestWriteConnGathersWritesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSocket()
		s.hold = make(chan struct{})
		w := newWriteConn(s)
		var want bytes.Buffer
		for i := range 100 {
			p := fmt.Appendf(nil, "frame %d;", i)
			want.Write(p)
			n, err := w.Write(p)
			require.NoError(t, err)
			require.Equal(t, len(p), n)
			if i == 0 {
				synctest.Wait() // the socket holds the first write
				calls, _ := s.written()
				require.Equal(t, 1, calls, "the socket is writing the first write")
			}
		}
		close(s.hold)
		synctest.Wait()
		calls, all := s.written()
		assert.Equal(t, 2, calls, "the 99 writes made meanwhile go out in one socket write")
		assert.Equal(t, want.String(), string(all))
		require.NoError(t, w.Close())
	})
}

// TestWriteConnOrderUnderConcurrentWriters: every writer's bytes arrive
// whole and in its order over a real TCP connection.
func TestWriteConnOrderUnderConcurrentWriters(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	w := newWriteConn(c)
	peer := <-accepted
	require.NotNil(t, peer)
	defer peer.Close()

	const writers, each = 8, 2000
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex // one record per Write, as amqp091 writes under its lock
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				mu.Lock()
				_, err := w.Write(fmt.Appendf(nil, "%d:%d\n", g, i))
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Close())
	next := make([]int, writers)
	lines := bytes.Split(bytes.TrimSuffix(<-got, []byte("\n")), []byte("\n"))
	require.Len(t, lines, writers*each)
	for _, line := range lines {
		var g, i int
		_, err := fmt.Sscanf(string(line), "%d:%d", &g, &i)
		require.NoError(t, err, "line %q", line)
		require.Equal(t, next[g], i, "writer %d's records out of order", g)
		next[g]++
	}
}

// TestWriteConnBackpressure: once writeConnMax bytes wait for a socket
// that takes nothing, a write waits, and goes on when the socket takes
// them.
func TestWriteConnBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSocket()
		s.hold = make(chan struct{})
		w := newWriteConn(s)
		chunk := make([]byte, 4096)
		_, err := w.Write(chunk) // the socket holds this one
		require.NoError(t, err)
		synctest.Wait()
		for range writeConnMax / len(chunk) {
			_, err := w.Write(chunk)
			require.NoError(t, err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := w.Write(chunk)
			done <- err
		}()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("a write past writeConnMax returned (%v) while the socket took nothing", err)
		default:
		}
		close(s.hold)
		synctest.Wait()
		require.NoError(t, <-done)
		synctest.Wait()
		_, all := s.written()
		assert.Len(t, all, (writeConnMax/len(chunk)+2)*len(chunk))
		require.NoError(t, w.Close())
	})
}

// TestWriteConnFailedWrite: a socket write that fails closes the socket;
// Read and later writes return that write's error.
func TestWriteConnFailedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSocket()
		s.err = syscall.EPIPE
		w := newWriteConn(s)
		_, err := w.Write([]byte("frame"))
		require.NoError(t, err, "taken into the buffer: the socket fails later")
		synctest.Wait()
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		assert.True(t, closed, "the socket is closed, so amqp091's reader ends the connection")
		_, err = w.Write([]byte("next"))
		assert.ErrorIs(t, err, syscall.EPIPE)
		_, err = w.Read(make([]byte, 8))
		assert.ErrorIs(t, err, syscall.EPIPE, "the reader reports why the connection ended")
		_ = w.Close()
	})
}

// TestWriteConnClose: Close lets the bytes taken reach the socket, for at
// most writeConnCloseFlush; it is idempotent; writes after it fail.
func TestWriteConnClose(t *testing.T) {
	t.Run("flushes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSocket()
			w := newWriteConn(s)
			_, err := w.Write([]byte("connection.close-ok"))
			require.NoError(t, err)
			require.NoError(t, w.Close())
			_, all := s.written()
			assert.Equal(t, "connection.close-ok", string(all))
			assert.NoError(t, w.Close(), "a second Close")
			_, err = w.Write([]byte("late"))
			assert.ErrorIs(t, err, net.ErrClosed)
		})
	})
	t.Run("bounded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSocket()
			s.hold = make(chan struct{}) // a frozen broker: the socket takes nothing
			w := newWriteConn(s)
			_, err := w.Write([]byte("frame"))
			require.NoError(t, err)
			blocked := make(chan error, 1)
			go func() { // a writer waiting for room when Close comes
				_, err := w.Write(make([]byte, writeConnMax))
				if err == nil {
					_, err = w.Write([]byte("more"))
				}
				blocked <- err
			}()
			synctest.Wait()
			start := time.Now()
			require.NoError(t, w.Close())
			assert.Equal(t, writeConnCloseFlush, time.Since(start), "Close waits for the socket at most writeConnCloseFlush")
			err = <-blocked
			assert.True(t, errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded), "the waiting writer ends: %v", err)
		})
	})
}
