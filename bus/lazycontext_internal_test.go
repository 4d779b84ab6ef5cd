package bus

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

// TestLazyContextActsAsWithDeadline checks that a lazyContext answers as
// context.WithDeadline(parent, at) would, whether or not anything made it
// by waiting on Done: its deadline, its error before and after the
// deadline, its parent's cancellation and values, context.Cause, and
// stop.
func TestLazyContextActsAsWithDeadline(t *testing.T) {
	for _, made := range []bool{false, true} {
		name := "never waited on"
		if made {
			name = "waited on"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent, cancelParent := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
				defer cancelParent(nil)
				at := time.Now().Add(time.Second)
				c := newLazyContext(parent, at)
				defer c.stop()
				if made {
					_ = c.Done()
				}
				got, ok := c.Deadline()
				assert.True(t, ok)
				assert.Equal(t, at, got)
				assert.NoError(t, c.Err(), "before the deadline")

				time.Sleep(time.Second)
				synctest.Wait()
				assert.ErrorIs(t, c.Err(), context.DeadlineExceeded, "at the deadline")
				select {
				case <-c.Done():
				default:
					t.Fatal("Done is not closed at the deadline")
				}
				assert.ErrorIs(t, context.Cause(c), context.DeadlineExceeded, "Cause at the deadline")
				assert.Equal(t, "v", c.Value(ctxKey{}), "the parent's values")
			})
		})
	}

	t.Run("an earlier parent deadline wins", func(t *testing.T) {
		parent, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newLazyContext(parent, time.Now().Add(time.Hour))
		defer c.stop()
		pd, _ := parent.Deadline()
		got, ok := c.Deadline()
		assert.True(t, ok)
		assert.Equal(t, pd, got)
	})

	t.Run("the parent's cancellation, before and after Done", func(t *testing.T) {
		for _, made := range []bool{false, true} {
			cause := errors.New("the bus closed")
			parent, cancel := context.WithCancelCause(context.Background())
			c := newLazyContext(parent, time.Time{})
			if made {
				_ = c.Done()
			}
			_, ok := c.Deadline()
			assert.False(t, ok, "no deadline of its own, none from the parent")
			cancel(cause)
			assert.ErrorIs(t, c.Err(), context.Canceled)
			<-c.Done()
			assert.ErrorIs(t, context.Cause(c), cause)
			c.stop()
		}
	})

	t.Run("stop cancels, before and after Done", func(t *testing.T) {
		a := newLazyContext(context.Background(), time.Now().Add(time.Hour))
		a.stop()
		require.ErrorIs(t, a.Err(), context.Canceled)
		<-a.Done() // made after stop: closed at once
		b := newLazyContext(context.Background(), time.Now().Add(time.Hour))
		done := b.Done()
		b.stop()
		<-done
		require.ErrorIs(t, b.Err(), context.Canceled)
		assert.Nil(t, b.Value(ctxKey{}), "Background has no values")
	})
}
