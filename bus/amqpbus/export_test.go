package amqpbus

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
