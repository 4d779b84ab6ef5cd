package amqpbus

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// SimulatePause makes the transport behave as if the process had just
// been paused (as the watchdog would after a SIGSTOP): deliveries run
// only once the broker has answered a round trip sent from now on.
func (t *Transport) SimulatePause() {
	t.pauseEnd.Store(t.mono())
}

// OnConsumeOpened sets a function that Consume calls once the consumer
// is open on the broker and before the transport counts it among the
// consumers it resumes after a reconnect. nil removes it.
func OnConsumeOpened(f func()) { testHookConsumeOpened = f }

// OnDeclared sets a function that DeclareQueue calls once the broker
// answered the declaration, before the transport records where the
// queue is. nil removes it.
func OnDeclared(f func()) { testHookDeclared = f }

// OnConfirm sets a function that sees each publish confirmation before
// the publisher: false withholds it. nil removes it.
func OnConfirm(f func(amqp.Confirmation) bool) { testHookConfirm = f }

// SetFastWindow sets how far fast publishes may run ahead of what the
// broker has been seen to read, for the transports dialled from now on;
// restore sets it back.
func SetFastWindow(n int64) (restore func()) {
	old := fastWindow
	fastWindow = n
	return func() { fastWindow = old }
}

// SetConfirmStall sets how long a publish may wait for its confirmation
// before its channel is closed, and how often that is checked, for the
// transports dialled from now on; restore sets them back.
func SetConfirmStall(after, every time.Duration) (restore func()) {
	a, e := confirmStall, confirmStallCheck
	confirmStall, confirmStallCheck = after, every
	return func() { confirmStall, confirmStallCheck = a, e }
}
