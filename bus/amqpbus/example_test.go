package amqpbus_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/message"
)

// A node on one broker: the transport reconnects by itself when the
// connection drops.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: os.Getenv("CLOUDBUS_AMQP_URL"), ConnectionName: "example"})
	if err != nil {
		log.Fatal(err) // names the broker by masked URL; matches message.ErrUnavailable
	}
	defer tr.Close()
	b, err := bus.Open(ctx, bus.Config{Transport: tr, Node: message.NewUUID(), Registry: message.NewRegistry()})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close() // runs before the transport's Close
}

// A node on a three-node RabbitMQ cluster: every broker node's URL, and
// quorum queues, replicated over a majority of them, so that the queues
// and their messages outlive the loss of one broker node. When the
// broker node in use goes, the transport moves to the next URL.
func ExampleDial_cluster() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := amqpbus.Dial(ctx, amqpbus.Config{
		URL:       "amqp://node:secret@rabbit-1:5672/,amqp://node:secret@rabbit-2:5672/,amqp://node:secret@rabbit-3:5672/",
		QueueType: amqpbus.QueueQuorum, // every node of the cluster must use the same
	})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	log.Printf("connected to %s", tr.Broker()) // amqp://node:xxxxx@rabbit-2:5672/, say
}
