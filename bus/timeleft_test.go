package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
)

// TestTimeLeftOnly: with cluster time, a call carries its deadline twice
// (time left and absolute); sent with a context marked by
// busx.TimeLeftOnly, only its time left.
func TestTimeLeftOnly(t *testing.T) {
	a, b, _ := pair(t, bus.Config{Clock: bus.LocalClock()})
	envs := make(chan wire.Envelope, 2)
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		envs <- *busx.EnvelopeOf(r)
		return Greeting{}, nil
	})))
	for _, ctx := range []context.Context{t.Context(), busx.TimeLeftOnly(t.Context())} {
		_, err := bus.Call[Greeting](ctx, a, b.LocalID("svc"), Greet{Name: "x"}, bus.WithTimeout(time.Second))
		require.NoError(t, err)
	}
	both, left := <-envs, <-envs
	assert.Positive(t, both.Timeout)
	assert.Positive(t, both.Deadline, "an absolute deadline in cluster time")
	assert.Positive(t, left.Timeout)
	assert.Zero(t, left.Deadline, "only the time left")
}
