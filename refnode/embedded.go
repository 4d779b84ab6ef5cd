package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/rest"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service/dashboard"
)

// maxEmbedded bounds -embedded.
const maxEmbedded = 9

// validateEmbedded checks the flags of refnode serve -embedded N, and
// gives -api-listen its default (127.0.0.1:8080: the nodes on 8080,
// 8081, ...). given reports whether a flag was set (or its variable).
func validateEmbedded(o *serveOptions, given func(flag string) bool) error {
	var errs []error
	if o.embedded < 1 || o.embedded > maxEmbedded {
		errs = append(errs, fmt.Errorf("-embedded %d: run 1 to %d nodes in this process", o.embedded, maxEmbedded))
	}
	if given("bus") || given("db") {
		errs = append(errs, errors.New("-embedded runs its nodes on an in-memory bus and database of its own: drop -bus and -db (or run refnode serve without -embedded to join a real cluster)"))
	}
	if o.apiListen == "" {
		o.apiListen = "127.0.0.1:8080"
	}
	if o.Heartbeat.OpTimeout == 0 {
		o.Heartbeat.OpTimeout = o.Heartbeat.Interval
	}
	if err := o.Heartbeat.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("-heartbeat %s, -evict-after %s: %w", o.Heartbeat.Interval, o.Heartbeat.EvictAfter, err))
	}
	if o.pingInterval <= 0 {
		errs = append(errs, errors.New("-ping-interval must be positive"))
	}
	return errors.Join(errs...)
}

// embeddedAddrs returns the REST address of each of n nodes: addr's
// port, then the next ones; port 0 picks a free port for each.
func embeddedAddrs(addr string, n int) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-api-listen %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+n-1 > 65535 {
		return nil, fmt.Errorf("-api-listen %q: the port must be a number from 0 to %d", addr, 65535-n+1)
	}
	out := make([]string, n)
	for i := range out {
		q := p
		if p != 0 {
			q = p + i
		}
		out[i] = net.JoinHostPort(host, strconv.Itoa(q))
	}
	return out, nil
}

// embeddedCluster is the nodes of an embedded cluster with the REST API
// served on each.
type embeddedCluster struct {
	c       *cluster
	log     *slog.Logger
	started time.Duration // until every ring held every node
	apis    []embeddedAPI
	clients []io.Closer
	wg      sync.WaitGroup
}

// embeddedAPI is one node's REST API, with its dashboard at /.
type embeddedAPI struct {
	m    *member
	srv  *http.Server
	dash *dashboard.Dashboard
	addr net.Addr
}

// newEmbeddedCluster starts o.embedded nodes in this process, on an in-memory
// bus, heartbeat store and record store, each serving the REST API on
// its address of o.apiListen. The caller closes it.
func newEmbeddedCluster(ctx context.Context, o serveOptions, log *slog.Logger) (*embeddedCluster, error) {
	addrs, err := embeddedAddrs(o.apiListen, o.embedded)
	if err != nil {
		return nil, err
	}
	lns := make([]net.Listener, 0, len(addrs))
	served := false
	defer func() {
		for _, ln := range lns {
			if !served { // closing a served one again is harmless
				_ = ln.Close()
			}
		}
	}()
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return nil, fmt.Errorf("REST API: %w; pick another -api-listen address (127.0.0.1:0 picks free ports)", err)
		}
		lns = append(lns, ln)
	}
	start := time.Now()
	c, err := startCluster(ctx, clusterConfig{nodes: o.embedded, prefix: o.Prefix, heartbeat: o.Heartbeat,
		hypervisor: simhv.Config{}, pingInterval: o.pingInterval, logger: log})
	if err != nil {
		return nil, fmt.Errorf("start the embedded cluster: %w", err)
	}
	e := &embeddedCluster{c: c, log: log, started: time.Since(start)}
	for i, m := range c.all() {
		cl, err := c.client(ctx, o.Prefix)
		if err != nil {
			e.close()
			return nil, err
		}
		e.clients = append(e.clients, cl)
		a, err := rest.New(rest.Config{Caller: cl, Store: c.db, Token: o.apiToken, Logger: log, Node: m.node, DeadLetters: m.node})
		if err != nil {
			e.close()
			return nil, err
		}
		d, err := dashboard.New(withNode(dashboardFigures(func() cloud.Store { return c.db }, func() *services.Set { return m.svc }), m.node, log))
		if err != nil {
			e.close()
			return nil, err
		}
		srv, ln := a.Server(), lns[i]
		h := http.NewServeMux()
		h.Handle("/", withDashboard(srv.Handler, d))
		h.HandleFunc("POST /embedded/kill", e.serveKill)
		srv.Handler = h
		srv.RegisterOnShutdown(func() { _ = d.Close() }) // ends the dashboard's live streams, which never idle
		e.apis = append(e.apis, embeddedAPI{m: m, srv: srv, dash: d, addr: ln.Addr()})
		e.wg.Go(func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				log.Warn("REST API", "node", m.node.UUID(), "err", err)
			}
		})
	}
	served = true // each server closes its listener
	return e, nil
}

// urls returns each node's REST API, in start order.
func (e *embeddedCluster) urls() []string {
	out := make([]string, len(e.apis))
	for i, a := range e.apis {
		out[i] = "http://" + a.addr.String()
	}
	return out
}

// kill crashes the node of API i, as a process dies: the node stops
// without a goodbye and its API stops answering.
func (e *embeddedCluster) kill(i int) {
	a := e.apis[i]
	_ = a.srv.Close()
	e.c.kill(a.m)
}

// serveKill is POST /embedded/kill on every node's API address, for
// demos: node=<label or UUID> (a form value) crashes that node as kill
// -9 would a process, once the answer is sent.
func (e *embeddedCluster) serveKill(w http.ResponseWriter, r *http.Request) {
	want := r.FormValue("node")
	for i, a := range e.apis {
		if want == "" || (want != a.m.label && want != a.m.node.UUID()) {
			continue
		}
		if !e.c.markKilled(a.m) {
			http.Error(w, fmt.Sprintf("node %s was killed already", a.m.label), http.StatusConflict)
			return
		}
		fmt.Fprintf(w, "killing node %s (%s): no goodbye, no more beats; the others evict it after -evict-after\n", a.m.label, a.m.node.UUID())
		_ = http.NewResponseController(w).Flush()
		e.wg.Go(func() { e.kill(i) }) // after this answer: the node may be this API's own
		return
	}
	http.Error(w, fmt.Sprintf("no node %q: give node=A, B, … or a node UUID, as printed at the start", want), http.StatusNotFound)
}

// close stops the APIs, then every node (live ones leave in order).
func (e *embeddedCluster) close() {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, a := range e.apis {
		if err := a.srv.Shutdown(sctx); err != nil {
			e.log.Warn("close the REST API", "err", err)
		}
	}
	e.wg.Wait()
	for _, a := range e.apis {
		_ = a.dash.Close()
	}
	for _, cl := range e.clients {
		_ = cl.Close()
	}
	if err := e.c.close(); err != nil {
		e.log.Warn("close the embedded cluster", "err", err)
	}
}

// serveEmbedded runs o.embedded nodes in this process, on an in-memory
// bus, heartbeat store and record store, each serving the REST API,
// until ctx ends; then every node leaves in order. Nothing is kept after
// it returns.
func serveEmbedded(ctx context.Context, o serveOptions, stdout io.Writer, log *slog.Logger) error {
	e, err := newEmbeddedCluster(ctx, o, log)
	if err != nil {
		return err
	}
	var left time.Time // when ctx ended
	defer func() {     // last: once the servers stopped and every node left
		if !left.IsZero() {
			fmt.Fprintf(stdout, "left:    in %s\n", time.Since(left).Round(time.Millisecond))
		}
	}()
	defer e.close()
	fmt.Fprintf(stdout, "embedded: %d nodes in this process on an in-memory bus and database (nothing is kept after exit), ready in %s\n",
		o.embedded, e.started.Round(time.Millisecond))
	for _, a := range e.apis {
		fmt.Fprintf(stdout, "node %s:  %s  api: http://%s/v1/  dashboard: http://%s/\n", a.m.label, a.m.node.UUID(), a.addr, a.addr)
	}
	if o.apiToken != "" {
		fmt.Fprintln(stdout, "api:     a bearer token is required (-api-token)")
	}
	fmt.Fprintln(stdout, "serving: SIGTERM or Ctrl-C stops every node in order; docs/rest.md has the routes")
	<-ctx.Done()
	fmt.Fprintf(stdout, "leaving: %v\n", context.Cause(ctx))
	left = time.Now()
	return nil
}
