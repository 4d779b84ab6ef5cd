package servicetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// Where asks which node handles a resource.
type Where struct {
	Resource string `json:"resource"`
}

// Here is the reply: the handling node.
type Here struct {
	Node string `json:"node"`
}

// whereService answers Where with its node's UUID. It accepts Where
// through api.portal, so a client's call reaches the resource's owner.
type whereService struct{ node string }

func (s *whereService) Name() string { return "where" }

func (s *whereService) APIMessages() []any { return []any{Where{}} }

func (s *whereService) Start(ctx context.Context, n *service.Node) error {
	s.node = n.UUID()
	return nil
}

func (s *whereService) Handle(ctx context.Context, r *bus.Request) (any, error) {
	return Here{Node: s.node}, nil
}

// whereOptions is a three-node cluster of whereService.
func whereOptions() servicetest.Options {
	reg := message.NewRegistry()
	message.MustRegister[Where](reg, "example.v1.Where")
	message.MustRegister[Here](reg, "example.v1.Here")
	return servicetest.Options{
		Nodes:    3,
		Registry: reg,
		Services: func(int, nodekit.Env) []service.Service { return []service.Service{&whereService{}} },
	}
}

// where asks the cluster, through the client, which node handles res.
// It retries errors whose code says nothing ran (message.RetrySafe): a
// node cut off from the heartbeat store still takes api.portal messages
// and, routing by its stale ring to itself while fenced, answers
// message.ErrNotOwner; the next attempt reaches another node's portal.
func where(ctx context.Context, cl *service.Client, res string) (string, error) {
	for {
		got, err := service.Call[Here](ctx, cl, Where{Resource: res}, bus.WithResource(res))
		if err == nil || message.CodeOf(err).Retry() != message.RetrySafe {
			return got.Node, err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(10 * time.Millisecond): // back off
		}
	}
}

// A three-node cluster in one call; a node dies and the others take over.
// In a test, use servicetest.Start(t, opts) inside synctest.Test for
// virtual time; this example runs in real time.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := servicetest.New(ctx, whereOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	cl, err := c.NewClient(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()

	res := message.NewUUID()
	owner := c.Owner(res)
	got, err := where(ctx, cl, res)
	fmt.Println("handled by the ring owner:", got == owner, err)

	c.Kill(owner) // no goodbye: peers evict it after the threshold
	if err := c.AwaitGone(ctx, owner); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.AwaitConverged(ctx); err != nil {
		fmt.Println(err)
		return
	}
	got, err = where(ctx, cl, res)
	fmt.Println("live nodes:", len(c.Live()))
	fmt.Println("taken over by a survivor:", got != owner && got == c.Owner(res), err)
	// Output:
	// handled by the ring owner: true <nil>
	// live nodes: 2
	// taken over by a survivor: true <nil>
}

// A node cut off from the heartbeat store keeps running but stops
// beating. It stops counting as live at once, yet stays in its peers'
// rings until they evict it; then the rings agree again and a survivor
// handles its resources. Once it reaches the store again it learns it
// was evicted and rejoins with a new epoch, under the same UUID, so it
// owns the same resources again.
func ExampleCluster_StopHeartbeat() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := servicetest.New(ctx, whereOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	cl, err := c.NewClient(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()

	res := message.NewUUID()
	owner := c.Owner(res)
	c.StopHeartbeat(owner)
	fmt.Println("live nodes:", len(c.Live()))
	fmt.Println("converged while peers still hold it:", c.Converged())

	if err := c.AwaitGone(ctx, owner); err != nil { // evicted by a peer
		fmt.Println(err)
		return
	}
	if err := c.AwaitConverged(ctx); err != nil {
		fmt.Println(err)
		return
	}
	got, err := where(ctx, cl, res)
	fmt.Println("converged after eviction:", c.Converged())
	fmt.Println("handled by a survivor:", got != owner && got == c.Owner(res), err)

	c.ResumeHeartbeat(owner)
	rejoined := func() bool { return len(c.Live()) == 3 && c.Converged() }
	if err := c.Await(ctx, "the node rejoined", rejoined); err != nil {
		fmt.Println(err)
		return
	}
	got, err = where(ctx, cl, res)
	fmt.Println("after it rejoined, handled by it again:", got == owner, err)
	// Output:
	// live nodes: 2
	// converged while peers still hold it: false
	// converged after eviction: true
	// handled by a survivor: true <nil>
	// after it rejoined, handled by it again: true <nil>
}
