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
// through its fence, each commit told to the recorder) under random
// faults, four clients writing unique values and reading them back,
// every register's history checked and its commits audited. In a test,
// run it inside synctest.Test: thousands of operations take a second.
// This example runs in real time, for about 2 s.
func Example() {
	ctx, rec, key := context.Background(), chaos.NewRecorder(nil), message.NewUUID()
	var fp atomic.Pointer[memfence.Fence]
	db := &table{vals: map[string]string{}}
	newNode := func(int, nodekit.Env) []service.Service {
		return []service.Service{newRegisters(correct, &fp, db, rec)}
	}
	c, err := servicetest.New(ctx, servicetest.Options{Nodes: 5, Registry: registry(), Services: newNode})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fp.Store(memfence.New(c.Store(), memfence.Config{MaxAge: c.Node(0).Heartbeat().Lease}))
	cl, err := c.NewClient(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
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
				rep, err := service.Call[Reply](cctx, cl, msg, bus.WithResource(key), bus.WithID(rec.ID(op)))
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
	fmt.Println("linearizable:", report.OK(), "audit clean:", rec.Audit(time.Second, nil).OK())
	// Output: linearizable: true audit clean: true
}
