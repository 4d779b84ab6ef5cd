package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/dashboard"
)

// A node's dashboard on the program's own HTTP mux, beside its other
// routes, with a figure of the program's; a script reads the same data
// as JSON.
func Example() {
	ctx := context.Background()
	net, store := membus.New(), memstore.New(memstore.Config{})
	id := message.NewUUID()
	node, err := service.StartNode(ctx, service.Config{Node: id, Transport: net.Transport(id), OwnTransport: true,
		Store: store.For(id), Registry: message.NewRegistry(), Heartbeat: heartbeat.TestConfig()})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()

	d, err := dashboard.New(dashboard.Config{Node: node,
		Gauges: func(ctx context.Context) (map[string]int64, error) { return map[string]int64{"jobs in flight": 0}, nil }})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	d.Register(mux) // GET /, /dashboard.json, /dashboard/events, /dashboard/owner
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/dashboard.json")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var s dashboard.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d member, %s, every ring agrees: %t, share %.0f%%, jobs in flight: %d\n",
		len(s.Members), s.Members[0].Health, s.Agreed, 100*s.Members[0].Share, s.Gauges["jobs in flight"])
	// Output: 1 member, healthy, every ring agrees: true, share 100%, jobs in flight: 0
}
