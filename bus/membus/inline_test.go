package membus_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNonBlockingConsumerRunsOnThePublisher checks what
// driver.ConsumeOptions.NonBlocking buys on membus: an idle consumer's
// handler runs on the publisher's goroutine, before Publish returns; a
// busy one's message waits for it (a publish from its own handler), and
// the consumer's Close waits for a handler running on a publisher.
func TestNonBlockingConsumerRunsOnThePublisher(t *testing.T) {
	net := membus.New()
	pub, sub := net.Transport("pub"), net.Transport("sub")
	defer pub.Close()
	declare(t, sub, "q")
	type call struct {
		body      string
		publisher bool // ran on the goroutine that published it
	}
	calls := make(chan call, 10)
	var publisher uint64
	release := make(chan struct{})
	_, err := sub.Consume(t.Context(), "q", driver.ConsumeOptions{Prefetch: 4, NonBlocking: true}, func(d driver.Delivery) {
		body := string(d.Body())
		calls <- call{body, goid() == publisher}
		switch body {
		case "first":
			// From its own handler: the consumer is busy, so this one
			// must wait for this call to end, on the consumer's goroutine.
			assert.NoError(t, sub.Publish(t.Context(), "q", []byte("nested")))
		case "slow":
			<-release
		}
		_ = d.Ack()
	})
	require.NoError(t, err)

	publisher = goid()
	require.NoError(t, pub.Publish(t.Context(), "q", []byte("first")))
	select {
	case c := <-calls:
		assert.Equal(t, call{"first", true}, c, "an idle non-blocking consumer runs on the publisher, before Publish returns")
	default:
		t.Fatal("Publish returned before the idle non-blocking consumer's handler ran")
	}
	select {
	case c := <-calls:
		assert.Equal(t, call{"nested", false}, c, "a message for a busy consumer runs on its own goroutine")
	case <-time.After(10 * time.Second):
		t.Fatal("the message published from the handler was never handled")
	}

	published := make(chan struct{})
	go func() {
		defer close(published)
		assert.NoError(t, pub.Publish(t.Context(), "q", []byte("slow")))
	}()
	<-calls
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		assert.NoError(t, sub.Close())
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a handler ran on a publisher's goroutine")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-published
	<-closed
}

// goid returns the calling goroutine's id, from its stack trace's first
// line ("goroutine 18 [running]:").
func goid() uint64 {
	var buf [32]byte
	n := runtime.Stack(buf[:], false)
	var id uint64
	for _, c := range buf[len("goroutine "):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
