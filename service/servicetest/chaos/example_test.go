package chaos_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// Five nodes of a register service (register_test.go: Write and Read
// through its fence) under random faults, four clients writing unique
// values and reading them back, every register's history checked. In a
// test, run it inside synctest.Test: thousands of operations take a
// second. This example runs in real time, for about 2 s.
func Example() {
	ctx := context.Background()
	var fp atomic.Pointer[memfence.Fence]
	db := &table{vals: map[string]string{}}
	c, err := servicetest.New(ctx, servicetest.Options{Nodes: 5, Registry: registry(),
		Services: func(int, nodekit.Env) []service.Service { return []service.Service{newRegisters(correct, &fp, db)} }})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fp.Store(memfence.New(c.Store(), memfence.Config{MaxAge: c.Node(0).Heartbeat().Lease}))
	cl, _ := c.NewClient(ctx)
	defer cl.Close()

	rec, key := chaos.NewRecorder(nil), message.NewUUID()
	nctx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	healed := make(chan error)
	go func() { _, err := (&chaos.Nemesis{Cluster: c, Seed: 7}).Run(nctx); healed <- err }() // every fault kind
	var wg sync.WaitGroup
	for client := range 4 {
		wg.Go(func() {
			for i := 0; nctx.Err() == nil; i++ {
				in, msg := chaos.RegisterOp{Kind: chaos.Read}, any(Read{Key: key})
				if i%2 == 0 {
					v := fmt.Sprintf("c%d.%d", client, i)
					in, msg = chaos.RegisterOp{Kind: chaos.Write, Value: v}, Write{Key: key, Value: v}
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				deadline, _ := cctx.Deadline()
				op := rec.Invoke(client, key, in)
				rep, err := service.Call[Reply](cctx, cl, msg, bus.WithResource(key))
				rec.End(op, chaos.RegisterOutput{Value: rep.Value}, err, deadline)
				cancel()
			}
		})
	}
	wg.Wait()
	if err := <-healed; err != nil {
		fmt.Println(err)
	}
	report, _ := chaos.Check(chaos.Register(""), rec, 10*time.Second, "")
	fmt.Println("linearizable:", report.OK())
	// Output: linearizable: true
}
