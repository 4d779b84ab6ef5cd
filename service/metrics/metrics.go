package metrics

import (
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// Config configures [New]. Its zero value works: a new registry, no node
// yet (set it with [Metrics.SetNode]), no pools.
type Config struct {
	// Registry receives the collectors. Default: a new registry with the
	// Go runtime and process collectors.
	Registry *prometheus.Registry
	// Node is the node whose state the collector reads at each scrape;
	// nil until [Metrics.SetNode]. Default nil.
	Node *service.Node
	// Transport is the node's transport; when it has a
	// ConnectionsLost() uint64 method (amqpbus), its count is exported.
	// Default nil: the connected gauge then comes from Node.
	Transport driver.Transport
	// Pools are database pools whose sql.DBStats are exported, by name
	// (the db_name label). Default none.
	Pools map[string]*sql.DB
	// MaxSeries bounds the message-flow series (op, service, type)
	// created by observations; an observation past the bound counts under
	// type="other". Default 2000.
	MaxSeries int
	// Fence is the fence of the node's services' writes
	// (*sqlfence.Fence, *memfence.Fence), whose counts are read at each
	// scrape as cloudbus_fence_*_total. Default nil (a nil pointer
	// too): no fence metrics.
	Fence FenceStats
}

// FenceStats is a fence that counts what it did: *sqlfence.Fence and
// *memfence.Fence.
type FenceStats interface {
	// Stats returns the counts since the fence was made.
	Stats() fence.Stats
}

// Validate reports every problem with cfg at once.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.MaxSeries < 0 {
		errs = append(errs, fmt.Errorf("metrics: MaxSeries %d is negative; use 0 for the default", cfg.MaxSeries))
	}
	for name, db := range cfg.Pools {
		if name == "" || db == nil {
			errs = append(errs, fmt.Errorf("metrics: pool %q: a pool needs a name and a non-nil *sql.DB", name))
		}
	}
	return errors.Join(errs...)
}

// Metrics is the Prometheus adapter: a [bus.Observer] counting the
// message flow, and a collector reading the node's state at each scrape.
// Its methods are safe for concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	node      atomic.Pointer[service.Node]
	transport driver.Transport
	fence     FenceStats
	maxSeries int

	messages *prometheus.CounterVec
	failures *prometheus.CounterVec
	forwards *prometheus.CounterVec
	reroutes *prometheus.CounterVec
	calls    *prometheus.HistogramVec
	handles  *prometheus.HistogramVec
	queued   *prometheus.HistogramVec

	mu     sync.RWMutex
	series map[seriesKey]*series
}

// seriesKey names one message-flow series; every field is bounded.
type seriesKey struct {
	op      bus.Op
	forward bool // Observation.Forward
	service string
	typ     string
}

// series holds the label children of one (op, service, type), resolved
// once, so Observe only looks them up.
type series struct {
	messages prometheus.Counter  // nil for OpReroute
	forwards prometheus.Counter  // forwards; else nil
	duration prometheus.Observer // OpCall, OpHandle; else nil
	queued   prometheus.Observer // OpHandle; else nil
	key      seriesKey

	mu       sync.RWMutex
	failures map[message.Code]prometheus.Counter
}

// New builds the adapter and registers its collectors on cfg.Registry. It
// returns an error if cfg is invalid or a collector is already
// registered there.
func New(cfg Config) (*Metrics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxSeries == 0 {
		cfg.MaxSeries = 2000
	}
	if v := reflect.ValueOf(cfg.Fence); cfg.Fence != nil && v.Kind() == reflect.Pointer && v.IsNil() {
		cfg.Fence = nil // a node without a fence
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	flow := []string{"op", "service", "type"}
	m := &Metrics{
		reg:       reg,
		transport: cfg.Transport,
		fence:     cfg.Fence,
		maxSeries: cfg.MaxSeries,
		series:    make(map[seriesKey]*series),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbus_messages_total",
			Help: "Messages by what the bus did with them (op: send, call, broadcast, handle, reply, event, reject, release, retry, dead-letter, late-reply), target service and message type.",
		}, flow),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbus_forwards_total",
			Help: "Messages this node passed on as they came, by target service and type: the API portal's forwards (each attempt) and one-way messages forwarded to their owner; each is also an op call or send of cloudbus_messages_total.",
		}, []string{"service", "type"}),
		reroutes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbus_reroutes_total",
			Help: "Messages about a resource this node sent again, to the owner by its ring, by service, type and the code of the failed attempt (not_owner, no_route, node_left).",
		}, []string{"service", "type", "code"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbus_message_failures_total",
			Help: "Messages whose operation failed, by op, service, type and error code (a reject's code says why it was refused: timeout for late).",
		}, append(flow, "code")),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cloudbus_call_duration_seconds",
			Help:    "Round trip of calls made by this node, caller side, by target service and type.",
			Buckets: durationBuckets,
		}, []string{"service", "type"}),
		handles: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cloudbus_handle_duration_seconds",
			Help:    "Handler run time on this node, by service and type.",
			Buckets: durationBuckets,
		}, []string{"service", "type"}),
		queued: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cloudbus_handle_queued_seconds",
			Help:    "How long a message waited on this node before its handler ran, by service and type.",
			Buckets: durationBuckets,
		}, []string{"service", "type"}),
	}
	if cfg.Node != nil {
		m.node.Store(cfg.Node)
	}
	cs := []prometheus.Collector{m.messages, m.failures, m.forwards, m.reroutes, m.calls, m.handles, m.queued, &stateCollector{m: m}}
	for name, db := range cfg.Pools {
		cs = append(cs, collectors.NewDBStatsCollector(db, name))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, r := range cs {
				reg.Unregister(r)
			}
			return nil, fmt.Errorf("metrics: register the collectors: %w; use a registry without cloudbus metrics, or a new one", err)
		}
	}
	return m, nil
}

// durationBuckets spans 0.5 ms to 10 s: a local handler to a call near
// its default timeout.
var durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// SetNode makes n the node read at each scrape; nil stops reading one.
// A node is built after its Observer, so set it once it exists.
func (m *Metrics) SetNode(n *service.Node) { m.node.Store(n) }

// Registry returns the registry the collectors are on, to add a
// program's own metrics to the same /metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler returns the HTTP handler serving the registry in the
// Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Observe records o. It is safe for concurrent use, never blocks on I/O
// and, once o's series exists, does not allocate (for an o without Err).
func (m *Metrics) Observe(o bus.Observation) {
	k := seriesKey{op: o.Op, forward: o.Forward, service: serviceName(o.ServiceID), typ: o.Type}
	m.mu.RLock()
	s := m.series[k]
	m.mu.RUnlock()
	if s == nil {
		s = m.newSeries(k)
	}
	if o.Op == bus.OpReroute {
		// Counted by the failed attempt's code only: a re-route always
		// has one.
		code := message.CodeOf(o.Err)
		if code == "" {
			code = other
		}
		s.failure(m, code).Inc()
		return
	}
	s.messages.Inc()
	if s.forwards != nil {
		s.forwards.Inc()
	}
	if s.duration != nil {
		s.duration.Observe(o.Duration.Seconds())
	}
	if s.queued != nil {
		s.queued.Observe(o.Queued.Seconds())
	}
	if o.Err != nil {
		s.failure(m, message.CodeOf(o.Err)).Inc()
	}
}

var _ bus.Observer = (*Metrics)(nil)

// serviceName is the service part of a service id: never the node UUID.
func serviceName(id string) string {
	if id == "" || id == bus.APIPortal {
		return id
	}
	if s, _, ok := bus.SplitServiceID(id); ok {
		return s
	}
	return id
}

// Label values past these bounds count as "other".
const (
	maxLabelLen = 128
	other       = "other"
)

func (m *Metrics) newSeries(k seriesKey) *series {
	if len(k.service) > maxLabelLen || !labelSafe(k.service) {
		k.service = other
	}
	if len(k.typ) > maxLabelLen || !labelSafe(k.typ) {
		k.typ = other
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.series[k]; s != nil {
		return s
	}
	if len(m.series) >= m.maxSeries {
		k.typ = other
		if s := m.series[k]; s != nil {
			return s
		}
	}
	s := &series{key: k}
	if k.op == bus.OpReroute {
		m.series[k] = s // counted only by code, in failure
		return s
	}
	s.messages = m.messages.WithLabelValues(k.op.String(), k.service, k.typ)
	if k.forward {
		s.forwards = m.forwards.WithLabelValues(k.service, k.typ)
	}
	switch k.op {
	case bus.OpCall:
		s.duration = m.calls.WithLabelValues(k.service, k.typ)
	case bus.OpHandle:
		s.duration = m.handles.WithLabelValues(k.service, k.typ)
		s.queued = m.queued.WithLabelValues(k.service, k.typ)
	}
	m.series[k] = s
	return s
}

// labelSafe reports a printable ASCII label value: what service names
// and message type names are; anything else came from outside and counts
// as "other".
func labelSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// maxCodes bounds the error codes counted per series.
const maxCodes = 64

func (s *series) failure(m *Metrics, code message.Code) prometheus.Counter {
	s.mu.RLock()
	c := s.failures[code]
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.failures[code]; c != nil {
		return c
	}
	label := string(code)
	if len(s.failures) >= maxCodes || len(label) > maxLabelLen || !labelSafe(label) {
		code, label = other, other
		if c := s.failures[code]; c != nil {
			return c
		}
	}
	if s.failures == nil {
		s.failures = make(map[message.Code]prometheus.Counter)
	}
	if s.key.op == bus.OpReroute {
		c = m.reroutes.WithLabelValues(s.key.service, s.key.typ, label)
	} else {
		c = m.failures.WithLabelValues(s.key.op.String(), s.key.service, s.key.typ, label)
	}
	s.failures[code] = c
	return c
}
