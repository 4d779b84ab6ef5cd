package servicetest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// Add adds one to a resource's counter.
type Add struct {
	Resource string `json:"resource"`
}

// ResourceUUID routes Add to the resource's owner.
func (a Add) ResourceUUID() string { return a.Resource }

// Added is the reply: the count, and the node that wrote it.
type Added struct {
	N    int64  `json:"n"`
	Node string `json:"node"`
}

// counterRegistry holds Add and Added.
func counterRegistry() *message.Registry {
	reg := message.NewRegistry()
	message.MustRegister[Add](reg, "example.v1.Add")
	message.MustRegister[Added](reg, "example.v1.Added")
	return reg
}

// counterSchema is the counters' table, <Env.Tables>_counters.
var counterSchema = nodekit.Schema{Migrations: func(d sqlstore.Dialect, tables string) [][]string {
	return [][]string{{ // version 1
		"CREATE TABLE " + tables + "_counters (resource VARCHAR(36) PRIMARY KEY, n BIGINT NOT NULL)",
	}}
}}

// counterService is a node's counter service, on the node's database:
// it accepts Add through api.portal, so that a client can call it.
func counterService(env nodekit.Env) service.Service {
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, _ Add) (Added, error) {
		return add(ctx, env, r)
	})
	return service.API("counter", mux)
}

// add adds one to r's resource's counter in a transaction of the node's
// fence: it commits only while the node's claim on the resource holds,
// and once per message id (a redelivery gets the first reply).
func add(ctx context.Context, env nodekit.Env, r *bus.Request) (Added, error) {
	table := env.Tables + "_counters"
	reply, err := env.Fence.Do(ctx, fence.For(ctx, r), func(ctx context.Context, tx *sql.Tx, _ fence.Token) ([]byte, error) {
		res, err := tx.ExecContext(ctx, bind(env.Dialect, "UPDATE "+table+" SET n = n + 1 WHERE resource = ?"), r.Resource())
		if err != nil {
			return nil, err
		}
		if updated, err := res.RowsAffected(); err != nil {
			return nil, err
		} else if updated == 0 {
			if _, err := tx.ExecContext(ctx, bind(env.Dialect, "INSERT INTO "+table+" (resource, n) VALUES (?, 1)"), r.Resource()); err != nil {
				return nil, err
			}
		}
		out := Added{Node: env.Node}
		if err := tx.QueryRowContext(ctx, bind(env.Dialect, "SELECT n FROM "+table+" WHERE resource = ?"), r.Resource()).Scan(&out.N); err != nil {
			return nil, err
		}
		return json.Marshal(out)
	})
	if err != nil {
		return Added{}, err
	}
	var out Added
	return out, json.Unmarshal(reply, &out)
}

// bind writes query's ? placeholders as d wants them: $1, $2, ... on
// PostgreSQL.
func bind(d sqlstore.Dialect, query string) string {
	if d != sqlstore.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// A cluster on a SQLite file, with a repository fenced as it is in
// production: the node that wrote a counter last has the resource's
// claim, a message sent twice is counted once, and once the owner dies
// a survivor counts on from the same row. The test calls
// servicetest.Start(t, opts) instead, and queries with c.DB().
func Example_fencedSQL() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := servicetest.New(ctx, servicetest.Options{
		Database: "sqlite", // or a PostgreSQL URL, or a MySQL DSN
		Schema:   &counterSchema,
		Registry: counterRegistry(),
		Services: func(_ int, env nodekit.Env) []service.Service {
			return []service.Service{counterService(env)}
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close() // drops the tables, removes the file
	cl, err := c.NewClient(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()

	res := message.NewUUID()
	owner := c.Owner(res)
	got, err := service.Call[Added](ctx, cl, Add{Resource: res})
	fmt.Println("counted by the owner:", got.N, got.Node == owner, err)

	id := message.NewUUID() // one message, sent twice
	for range 2 {
		got, err = service.Call[Added](ctx, cl, Add{Resource: res}, bus.WithID(id))
	}
	fmt.Println("sent twice, counted once:", got.N, err)

	c.Kill(owner) // peers evict it; a call about its resource waits, then goes to the new owner
	got, err = service.Call[Added](ctx, cl, Add{Resource: res}, bus.WithRetry(3))
	fmt.Println("owner killed, counted by a survivor:", got.N, got.Node != owner, err)

	var n int64
	err = c.DB().QueryRowContext(ctx, "SELECT n FROM "+c.Database().Tables+"_counters WHERE resource = ?", res).Scan(&n)
	fmt.Println("in the table:", n, err)
	// Output:
	// counted by the owner: 1 true <nil>
	// sent twice, counted once: 2 <nil>
	// owner killed, counted by a survivor: 3 true <nil>
	// in the table: 3 <nil>
}
