package bus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestForgedMarkersDoNotCircle: the drain header is the bus's own. A
// request carrying it is refused; a marker no bus could have sent (no
// deadline, or one further than markerTTL) is dropped at once; one with
// a timeout alone, which restarts at every delivery, is dropped once this
// bus has given it back for markerTTL. Before, a client's message with
// the header and no deadline went round the queue every 50 ms for good.
func TestForgedMarkersDoNotCircle(t *testing.T) {
	marker := func(timeout time.Duration, deadline int64) *wire.Envelope {
		return &wire.Envelope{ID: message.NewUUID(), Kind: wire.KindSend, Type: message.TypeEmpty,
			Headers: map[string]string{headerDrain: "t"}, Timeout: timeout, Deadline: deadline}
	}
	req := marker(time.Second, 0)
	req.Kind = wire.KindRequest
	assert.ErrorIs(t, refuseReservedHeader(req), message.ErrBadRequest, "a request with the header")
	typed := marker(time.Second, 0)
	typed.Type = "example.v1.Greet"
	assert.ErrorIs(t, refuseReservedHeader(typed), message.ErrBadRequest, "a message of another type with the header")
	assert.NoError(t, refuseReservedHeader(marker(time.Second, 0)))

	assert.True(t, markerUnbounded(marker(0, 0)), "no deadline")
	assert.True(t, markerUnbounded(marker(markerTTL+time.Second, 0)), "a timeout past markerTTL")
	assert.False(t, markerUnbounded(marker(markerTTL, 0)))
	assert.False(t, markerUnbounded(marker(0, time.Now().UnixNano())))

	b := &CloudBus{}
	now := time.Now()
	assert.False(t, b.markerExpired("m", now), "first seen")
	assert.False(t, b.markerExpired("m", now.Add(markerTTL)), "given back for markerTTL")
	assert.True(t, b.markerExpired("m", now.Add(markerTTL+time.Millisecond)), "given back longer than markerTTL")
	assert.False(t, b.markerExpired("m", now.Add(markerTTL+2*time.Millisecond)), "forgotten once dropped")

	// A flood of markers: remembered up to maxMarkersSeen, the rest dropped.
	b = &CloudBus{}
	for i := range maxMarkersSeen {
		assert.False(t, b.markerExpired(message.NewUUID(), now.Add(time.Duration(i))))
	}
	assert.True(t, b.markerExpired("one more", now), "past maxMarkersSeen")
	assert.False(t, b.markerExpired("after they expired", now.Add(2*markerTTL)), "expired ones are forgotten to make room")
	assert.LessOrEqual(t, len(b.markersSeen), 1)
}

// TestRefusalLogIsBounded: a flood of refused messages logs a burst,
// then a few lines a second, and the next line logged says how many were
// not.
func TestRefusalLogIsBounded(t *testing.T) {
	var l logLimiter
	now := time.Now()
	logged := 0
	for range 1000 {
		if ok, _ := l.allow(now); ok {
			logged++
		}
	}
	assert.Equal(t, refusalBurst, logged, "a burst at one instant")
	ok, suppressed := l.allow(now.Add(time.Second))
	assert.True(t, ok, "a second later")
	assert.Equal(t, 1000-refusalBurst, suppressed)
	logged = 0
	for i := range 10_000 {
		if ok, _ := l.allow(now.Add(time.Second + time.Duration(i)*time.Millisecond)); ok {
			logged++
		}
	}
	assert.InDelta(t, 10*refusalRate, logged, 5, "10 s of a steady flood (and the tokens left from the second before)")
}
