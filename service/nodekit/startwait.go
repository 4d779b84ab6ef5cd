package nodekit

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/message"
)

// startWait tries the steps of a start that need a server again while
// the server does not answer yet, until a common deadline.
type startWait struct {
	until time.Time     // when to stop trying
	limit time.Duration // Settings.StartWait, for the messages
	log   *slog.Logger
}

// do runs step until it succeeds, fails with an error transient does not
// accept, ctx ends or w's deadline would pass before the next attempt.
// Attempts are 250 ms apart at first, doubling up to 2 s.
func (w startWait) do(ctx context.Context, what string, transient func(error) bool, step func() error) error {
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil {
			if attempt > 1 {
				w.log.Info("nodekit: "+what+" answers", "attempts", attempt)
			}
			return nil
		}
		if !transient(err) || ctx.Err() != nil {
			return err
		}
		if time.Now().Add(delay).After(w.until) {
			if attempt > 1 {
				return fmt.Errorf("%w (tried %d times in %s, -start-wait)", err, attempt, w.limit)
			}
			return err
		}
		level := slog.LevelDebug
		if attempt == 1 || attempt%10 == 0 {
			level = slog.LevelWarn
		}
		w.log.Log(ctx, level, "nodekit: "+what+" does not answer yet; trying again", "attempt", attempt,
			"start_wait", w.limit, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %w)", err, context.Cause(ctx))
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// brokerTransient reports whether a failed connection to the broker may
// succeed later: any, but a refused login.
func brokerTransient(err error) bool {
	return errors.Is(err, message.ErrUnavailable) && !errors.Is(err, amqpbus.ErrAccessRefused)
}

// dbTransient reports whether opening the database failed for want of
// an answer (the server is down, starting, or restarting), which may
// pass, rather than for what it said (a wrong password, a missing
// database), which will not.
func dbTransient(err error) bool {
	var sqlState interface{ SQLState() string }
	if errors.As(err, &sqlState) {
		// Class 08: connection exceptions; 57P03: the server is starting.
		c := sqlState.SQLState()
		return strings.HasPrefix(c, "08") || c == "57P03"
	}
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, context.DeadlineExceeded)
}
