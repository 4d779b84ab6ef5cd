package servicetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
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

// whereService answers Where with its node's UUID.
type whereService struct{ node string }

func (s *whereService) Name() string { return "where" }

func (s *whereService) Start(ctx context.Context, n *service.Node) error {
	s.node = n.UUID()
	return nil
}

func (s *whereService) Handle(ctx context.Context, r *bus.Request) (any, error) {
	return Here{Node: s.node}, nil
}

// A three-node cluster in one call; a node dies and the others take over.
// In a test, use servicetest.Start(t, opts) inside synctest.Test for
// virtual time; this example runs in real time.
func Example() {
	reg := message.NewRegistry()
	message.MustRegister[Where](reg, "example.v1.Where")
	message.MustRegister[Here](reg, "example.v1.Here")

	ctx := context.Background()
	c, err := servicetest.New(ctx, servicetest.Options{
		Nodes:    3,
		Registry: reg,
		Services: func(int) []service.Service { return []service.Service{&whereService{}} },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	res := message.NewUUID()
	owner := c.Owner(res)
	got, _ := service.Call[Here](ctx, c.Node(0), "where", res, Where{Resource: res})
	fmt.Println("handled by the ring owner:", got.Node == owner)

	c.Kill(owner) // no goodbye: peers evict it after the threshold
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.AwaitGone(wctx, owner); err != nil {
		fmt.Println(err)
		return
	}
	_ = c.AwaitConverged(wctx)
	survivor := c.Live()[0]
	got, _ = service.Call[Here](ctx, survivor, "where", res, Where{Resource: res})
	fmt.Println("live nodes:", len(c.Live()))
	fmt.Println("taken over by a survivor:", got.Node != owner && got.Node == c.Owner(res))
	// Output:
	// handled by the ring owner: true
	// live nodes: 2
	// taken over by a survivor: true
}
