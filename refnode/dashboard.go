package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/dashboard"
)

// dashboardFigures is refnode's part of a node's dashboard: the VMs and
// hosts each node owns and the jobs in flight (read from records), and
// the host takeovers and VM repairs of this node's services (set). Both
// are read at each call: serve sets them while the node opens.
func dashboardFigures(records func() cloud.Store, set func() *services.Set) dashboard.Config {
	return dashboard.Config{
		Resources: func(ctx context.Context, n *service.Node) (map[string]map[string]int, error) {
			st := records()
			if st == nil {
				return nil, nil
			}
			vms, err := st.VMs(ctx)
			if err != nil {
				return nil, err
			}
			hosts, err := st.Hosts(ctx)
			if err != nil {
				return nil, err
			}
			out := map[string]map[string]int{"VMs": {}, "hosts": {}}
			for _, vm := range vms {
				if o, err := n.Owner(vm.UUID); err == nil {
					out["VMs"][o]++
				}
			}
			for _, h := range hosts {
				if o, err := n.Owner(h.UUID); err == nil {
					out["hosts"][o]++
				}
			}
			return out, nil
		},
		Gauges: func(ctx context.Context) (map[string]int64, error) {
			st := records()
			if st == nil {
				return nil, nil
			}
			jobs, err := st.Jobs(ctx)
			if err != nil {
				return nil, err
			}
			var open int64
			for _, j := range jobs {
				if j.State == cloud.JobPending || j.State == cloud.JobRunning {
					open++
				}
			}
			return map[string]int64{"jobs in flight": open}, nil
		},
		Counters: func() map[string]uint64 {
			s := set()
			if s == nil {
				return nil
			}
			return map[string]uint64{"host takeovers": s.Host.Stats().Takeovers, "VM repairs": s.VM.Stats().Repairs}
		},
	}
}

// withNode returns cfg for node n, logging to log.
func withNode(cfg dashboard.Config, n *service.Node, log *slog.Logger) dashboard.Config {
	cfg.Node, cfg.Logger = n, log
	return cfg
}

// withDashboard serves d's routes beside h's: GET / and /dashboard...
// go to the dashboard, everything else to h.
func withDashboard(h http.Handler, d *dashboard.Dashboard) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	d.Register(mux)
	return mux
}
