package amqpbus

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

// headerDeliveries counts the deliveries of a message that came back
// unacknowledged. RabbitMQ's x-delivery-limit exists only on quorum
// queues; on classic queues the transport counts itself: a redelivered
// message is republished with the count incremented (and the original
// acknowledged), or dead-lettered once the count passes the limit.
const headerDeliveries = "x-cloudbus-deliveries"

var consumerTags atomic.Uint64

// consumer consumes one queue on its own channel.
type consumer struct {
	t        *Transport
	queue    string
	ch       *amqp.Channel
	tag      string
	limit    bus.QueueOptions
	handle   func(bus.Delivery)
	done     chan struct{} // closed when run returns
	stopOnce sync.Once

	mu          sync.Mutex
	outstanding int  // handed over, not yet settled
	cancelled   bool // no more deliveries wanted
}

// Consume implements [bus.Transport]: a channel per consumer with
// basic.qos prefetch, manual acknowledgements, deliveries handed to handle
// one at a time. A queue that does not exist fails with
// message.ErrNoRoute.
func (t *Transport) Consume(ctx context.Context, queue string, opts bus.ConsumeOptions, handle func(bus.Delivery)) (bus.Consumer, error) {
	op := "consume " + queue
	if handle == nil {
		return nil, fmt.Errorf("amqpbus: %s: nil handler: %w", op, message.ErrBadRequest)
	}
	if err := t.check(op); err != nil {
		return nil, err
	}
	ch, err := t.conn.Channel()
	if err != nil {
		return nil, t.opError(op, err)
	}
	if err := ch.Qos(max(opts.Prefetch, 1), 0, false); err != nil {
		_ = ch.Close()
		return nil, t.opError(op, err)
	}
	c := &consumer{
		t:      t,
		queue:  queue,
		ch:     ch,
		tag:    fmt.Sprintf("%s-%d", t.cfg.ConnectionName, consumerTags.Add(1)),
		handle: handle,
		done:   make(chan struct{}),
	}
	t.mu.Lock()
	c.limit = t.queues[queue]
	t.mu.Unlock()
	deliveries, err := ch.ConsumeWithContext(ctx, queue, c.tag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, t.opError(op, err)
	}
	t.mu.Lock()
	t.consumers[c] = struct{}{}
	t.mu.Unlock()
	go c.run(deliveries)
	return c, nil
}

func (c *consumer) run(deliveries <-chan amqp.Delivery) {
	defer close(c.done)
	for d := range deliveries {
		if d.Redelivered && c.limit.MaxDeliveries > 0 {
			c.recount(d)
			continue
		}
		c.mu.Lock()
		c.outstanding++
		c.mu.Unlock()
		c.handle(&delivery{c: c, d: d})
	}
}

// recount republishes a message that came back unacknowledged with its
// delivery count incremented, or moves it to the dead-letter queue once
// the count passes the limit; then acknowledges the original. The copy
// goes to the tail of the queue, so a poison message does not hold up
// the others.
func (c *consumer) recount(d amqp.Delivery) {
	n := deliveries(d.Headers) + 1
	headers := amqp.Table{headerDeliveries: int64(n)}
	dest := c.queue
	if n > c.limit.MaxDeliveries {
		dest = c.limit.DeadLetter
		headers = amqp.Table{
			headerDeliveries:     int64(n - 1),
			bus.HeaderDeadReason: fmt.Sprintf("handed to a consumer %d times without acknowledgement (limit %d): each consumer crashed or gave it back", n-1, c.limit.MaxDeliveries),
			bus.HeaderDeadQueue:  c.queue,
		}
		c.t.log.Warn("dead-lettering a poison message", "queue", c.queue, "dead_letter", dest, "deliveries", n-1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.t.cfg.PublishTimeout)
	defer cancel()
	err := c.t.publishTable(ctx, dest, d.Body, headers)
	if err != nil {
		c.t.log.Warn("could not requeue a redelivered message with its count; giving it back", "queue", c.queue, "err", err)
		_ = d.Nack(false, true)
		return
	}
	_ = d.Ack(false)
}

// deliveries reads the delivery count header (1 when absent: the first
// delivery was not counted in a header).
func deliveries(h amqp.Table) int {
	switch v := h[headerDeliveries].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	case int:
		return v
	}
	return 1
}

// stop cancels delivery; the channel stays open for acknowledgements of
// what was handed over, and closes when the last is settled.
func (c *consumer) stop() {
	c.stopOnce.Do(func() {
		_ = c.ch.Cancel(c.tag, false)
		c.mu.Lock()
		c.cancelled = true
		idle := c.outstanding == 0
		c.mu.Unlock()
		if idle {
			c.closeChannel()
		}
	})
}

func (c *consumer) closeChannel() {
	_ = c.ch.Close()
	c.t.mu.Lock()
	delete(c.t.consumers, c)
	c.t.mu.Unlock()
}

// settled records that a delivery was acknowledged or rejected.
func (c *consumer) settled() {
	c.mu.Lock()
	c.outstanding--
	idle := c.cancelled && c.outstanding == 0
	c.mu.Unlock()
	if idle {
		c.closeChannel()
	}
}

// Cancel implements [bus.Consumer]: no more deliveries; those handed over
// may still be acknowledged. It waits until no handle call is running, so
// it must not be called from this consumer's handle function.
func (c *consumer) Cancel() error {
	c.stop()
	<-c.done
	return nil
}

// delivery adapts amqp.Delivery to [bus.Delivery].
type delivery struct {
	c    *consumer
	d    amqp.Delivery
	once sync.Once
}

func (d *delivery) Body() []byte      { return d.d.Body }
func (d *delivery) Redelivered() bool { return d.d.Redelivered }

func (d *delivery) Header(key string) string {
	switch v := d.d.Headers[key].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// Ack acknowledges the delivery on the channel it came on. After that
// channel closed (connection lost) the broker has requeued it already;
// the error says so and nothing else happens: delivery tags are never
// used on another channel.
func (d *delivery) Ack() error {
	var err error
	d.once.Do(func() {
		err = d.d.Ack(false)
		d.c.settled()
	})
	return err
}

func (d *delivery) Reject(requeue bool) error {
	var err error
	d.once.Do(func() {
		err = d.d.Reject(requeue)
		d.c.settled()
	})
	return err
}
