package amqpbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/bustest"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

// The benchmarks compare the bus over this transport with raw amqp091-go
// doing the same work with the same settings, in one run against the same
// broker:
//
//	CLOUDBUS_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ go test ./bus/amqpbus -run '^$' -bench . -benchtime 3s
//
// Settings on both sides: a ~200-byte JSON payload; persistent, mandatory
// publishes, each waiting for its publisher confirm; 4 publishing
// channels; manual acknowledgement after handling; prefetch 256; the same
// number of concurrent senders or callers; requests handled concurrently
// on the server side; a reply queue per client.

const benchPrefetch = 256

var benchPayload = bustest.Echo{Text: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Seq: 1}

// BenchmarkSend: one-way throughput, 64 concurrent senders, measured
// until every message was consumed and acknowledged.
func BenchmarkSend(b *testing.B) {
	url := testenv.AMQPURL(b)
	runPair(b, "bus", func(b *testing.B) {
		prefix := benchPrefix()
		client, server, cleanup := benchBuses(b, url, prefix)
		defer cleanup()
		var got atomic.Int64
		mux := bus.NewMux()
		bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e bustest.Echo) (message.Empty, error) {
			got.Add(1)
			return message.Empty{}, nil
		})
		if err := server.Register(context.Background(), "sink", mux); err != nil {
			b.Fatal(err)
		}
		target := server.LocalID("sink")
		runThroughput(b, &got, func(ctx context.Context) error { return client.Send(ctx, target, benchPayload) })
	}, "raw-amqp091", func(b *testing.B) {
		r := newRaw(b, url)
		defer r.close()
		queue := benchPrefix() + ".raw.sink"
		r.declare(b, queue, false)
		var got atomic.Int64
		r.consume(b, queue, func(d amqp.Delivery) {
			var e bustest.Echo
			_ = json.Unmarshal(d.Body, &e)
			got.Add(1)
			_ = d.Ack(false)
		})
		body, _ := json.Marshal(benchPayload)
		runThroughput(b, &got, func(ctx context.Context) error { return r.publish(ctx, queue, amqp.Publishing{Body: body}) })
	})
	runPair(b, "bus-fast", func(b *testing.B) {
		prefix := benchPrefix()
		client, server, cleanup := benchBusesMode(b, url, prefix, bus.Fast)
		defer cleanup()
		var got atomic.Int64
		mux := bus.NewMux()
		bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e bustest.Echo) (message.Empty, error) {
			got.Add(1)
			return message.Empty{}, nil
		})
		if err := server.Register(context.Background(), "sink", mux); err != nil {
			b.Fatal(err)
		}
		target := server.LocalID("sink")
		runThroughput(b, &got, func(ctx context.Context) error { return client.Send(ctx, target, benchPayload) })
	}, "raw-amqp091-fast", func(b *testing.B) {
		r := newRaw(b, url)
		defer r.close()
		queue := benchPrefix() + ".raw.sink"
		r.declare(b, queue, false)
		var got atomic.Int64
		r.consume(b, queue, func(d amqp.Delivery) {
			var e bustest.Echo
			_ = json.Unmarshal(d.Body, &e)
			got.Add(1)
			_ = d.Ack(false)
		})
		body, _ := json.Marshal(benchPayload)
		runThroughput(b, &got, func(ctx context.Context) error { return r.publishFast(ctx, queue, amqp.Publishing{Body: body}) })
	})
}

// runPair runs the benchmark of the bus and that of its raw twin, in
// this order, or the twin first when CLOUDBUS_BENCH_BASELINE_FIRST is 1:
// cmd/benchreport sets it on every other round. In one process the
// first of a pair measured slower than the second (the Call at 1 caller:
// five runs of the bus, then five of the twin, 1.29x; the same binaries
// alternating one process each, 1.01x), so a fixed order favours the
// side that runs second.
func runPair(b *testing.B, busName string, busBench func(*testing.B), rawName string, rawBench func(*testing.B)) {
	if os.Getenv("CLOUDBUS_BENCH_BASELINE_FIRST") == "1" {
		b.Run(rawName, rawBench)
		b.Run(busName, busBench)
		return
	}
	b.Run(busName, busBench)
	b.Run(rawName, rawBench)
}

// runThroughput runs send from 64 goroutines and reports msgs/s once got
// reached the number of messages sent.
func runThroughput(b *testing.B, got *atomic.Int64, send func(context.Context) error) {
	b.SetParallelism(max(1, 64/max(1, parallelism())))
	start := time.Now()
	var sent atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := send(context.Background()); err != nil {
				b.Error(err)
				return
			}
			sent.Add(1)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for got.Load() < sent.Load() {
		if time.Now().After(deadline) {
			b.Fatalf("consumed %d of %d", got.Load(), sent.Load())
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(sent.Load())/time.Since(start).Seconds(), "msgs/s")
}

func parallelism() int { return testingGOMAXPROCS() }

// BenchmarkCall: request/reply at 1 and 64 concurrent callers, reporting
// calls/s and the p50 and p99 latency.
func BenchmarkCall(b *testing.B) {
	url := testenv.AMQPURL(b)
	for _, c := range []struct {
		callers int
		mode    bus.DeliveryMode
	}{{1, bus.Confirmed}, {64, bus.Confirmed}, {1, bus.Fast}, {64, bus.Fast}} {
		callers, suffix := c.callers, ""
		if c.mode == bus.Fast {
			suffix = "-fast"
		}
		runPair(b, fmt.Sprintf("bus%s/callers=%d", suffix, callers), func(b *testing.B) {
			prefix := benchPrefix()
			client, server, cleanup := benchBusesMode(b, url, prefix, c.mode)
			defer cleanup()
			mux := bus.NewMux()
			bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e bustest.Echo) (bustest.Echoed, error) {
				return bustest.Echoed{Text: e.Text, Seq: e.Seq}, nil
			})
			if err := server.Register(context.Background(), "echo", mux); err != nil {
				b.Fatal(err)
			}
			target := server.LocalID("echo")
			runLatency(b, callers, func(ctx context.Context) error {
				_, err := bus.Call[bustest.Echoed](ctx, client, target, benchPayload)
				return err
			})
		}, fmt.Sprintf("raw-amqp091%s/callers=%d", suffix, callers), func(b *testing.B) {
			srv := newRaw(b, url)
			defer srv.close()
			cli := newRaw(b, url)
			defer cli.close()
			queue := benchPrefix() + ".raw.echo"
			srv.declare(b, queue, false)
			srv.consume(b, queue, func(d amqp.Delivery) {
				go func() { // handled concurrently, as the bus does
					var e bustest.Echo
					_ = json.Unmarshal(d.Body, &e)
					out, _ := json.Marshal(bustest.Echoed{Text: e.Text, Seq: e.Seq})
					reply := amqp.Publishing{CorrelationId: d.CorrelationId, Body: out}
					if c.mode == bus.Fast {
						_ = srv.publishFast(context.Background(), d.ReplyTo, reply)
					} else {
						_ = srv.publish(context.Background(), d.ReplyTo, reply)
					}
					_ = d.Ack(false)
				}()
			})
			rpc := newRawRPC(b, cli)
			rpc.fast = c.mode == bus.Fast
			body, _ := json.Marshal(benchPayload)
			runLatency(b, callers, func(ctx context.Context) error { return rpc.call(ctx, queue, body) })
		})
	}
}

// runLatency runs b.N calls spread over callers goroutines and reports
// calls/s, p50 and p99.
func runLatency(b *testing.B, callers int, call func(context.Context) error) {
	lat := make([][]time.Duration, callers)
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := call(ctx)
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

func benchPrefix() string { return "amqpbus-test-bench-" + message.NewUUID()[:8] }

// benchBuses opens a client and a server bus, each on its own connection.
func benchBuses(b *testing.B, url, prefix string) (client, server *bus.CloudBus, cleanup func()) {
	return benchBusesMode(b, url, prefix, bus.Confirmed)
}

// benchBusesMode is benchBuses with both buses sending in mode.
func benchBusesMode(b *testing.B, url, prefix string, mode bus.DeliveryMode) (client, server *bus.CloudBus, cleanup func()) {
	ctx := context.Background()
	var trs []*amqpbus.Transport
	var buses []*bus.CloudBus
	for range 2 {
		tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: url, ConnectionName: "cloudbus-bench", Publishers: benchPublishers()})
		if err != nil {
			b.Fatal(err)
		}
		bb, err := bus.Open(ctx, bus.Config{Transport: tr, Prefix: prefix, Registry: bustest.Registry(), Delivery: mode, Limits: bus.Limits{Prefetch: benchPrefetch}})
		if err != nil {
			b.Fatal(err)
		}
		trs = append(trs, tr)
		buses = append(buses, bb)
	}
	return buses[0], buses[1], func() {
		for i, bb := range buses {
			_ = bb.Close()
			for _, id := range busx.Of(bb).Services() {
				_ = trs[i].DeleteQueue(ctx, busx.Of(bb).QueueName(id))
			}
			_ = trs[i].DeleteQueue(ctx, bb.DeadLetterQueue())
			_ = trs[i].Close()
		}
	}
}

// raw is plain amqp091-go with the bus's settings: one connection, 4
// publishing channels in confirm mode, mandatory persistent publishes;
// and, for the fast mode, 4 channels without confirms for transient
// publishes that are neither mandatory nor confirmed.
type raw struct {
	conn  *amqp.Connection
	ctl   *amqp.Channel
	pubs  []*rawPub
	fast  []*amqp.Channel
	next  atomic.Uint64
	queue []string
}

type rawPub struct {
	mu sync.Mutex
	ch *amqp.Channel
}

func newRaw(b *testing.B, url string) *raw {
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	ctl, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	r := &raw{conn: conn, ctl: ctl}
	for range 4 {
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		go func() { // returns must be drained
			for range ch.NotifyReturn(make(chan amqp.Return, 16)) {
			}
		}()
		r.pubs = append(r.pubs, &rawPub{ch: ch})
		fast, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		r.fast = append(r.fast, fast)
	}
	return r
}

// publishFast publishes to queue transient, not mandatory, unconfirmed,
// as the bus's fast mode does.
func (r *raw) publishFast(ctx context.Context, queue string, p amqp.Publishing) error {
	ch := r.fast[r.next.Add(1)%uint64(len(r.fast))]
	p.DeliveryMode = amqp.Transient
	p.ContentType = "application/json"
	return ch.PublishWithContext(ctx, "", queue, false, false, p)
}

func (r *raw) declare(b *testing.B, name string, exclusive bool) {
	args := amqp.Table{"x-expires": int64(30 * time.Minute / time.Millisecond)}
	durable, autoDelete := true, false
	if exclusive {
		args, durable, autoDelete = nil, false, true
	}
	if _, err := r.ctl.QueueDeclare(name, durable, autoDelete, exclusive, false, args); err != nil {
		b.Fatal(err)
	}
	if !exclusive {
		r.queue = append(r.queue, name)
	}
}

func (r *raw) consume(b *testing.B, queue string, f func(amqp.Delivery)) {
	ch, err := r.conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Qos(benchPrefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for d := range ds {
			f(d)
		}
	}()
}

// publish publishes to queue and waits for the confirm, like the bus.
func (r *raw) publish(ctx context.Context, queue string, p amqp.Publishing) error {
	pub := r.pubs[r.next.Add(1)%uint64(len(r.pubs))]
	p.DeliveryMode = amqp.Persistent
	p.ContentType = "application/json"
	pub.mu.Lock()
	dc, err := pub.ch.PublishWithDeferredConfirm("", queue, true, false, p)
	pub.mu.Unlock()
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("nack")
	}
	return nil
}

func (r *raw) close() {
	for _, q := range r.queue {
		_, _ = r.ctl.QueueDelete(q, false, false, false)
	}
	_ = r.conn.Close()
}

// rawRPC is request/reply on plain amqp091-go: an exclusive reply queue
// and a map of waiting callers by correlation id.
type rawRPC struct {
	r       *raw
	fast    bool // publish requests as publishFast does
	replyTo string
	mu      sync.Mutex
	waiting map[string]chan []byte
	ids     atomic.Uint64
}

func newRawRPC(b *testing.B, r *raw) *rawRPC {
	rpc := &rawRPC{r: r, replyTo: benchPrefix() + ".raw.reply", waiting: map[string]chan []byte{}}
	r.declare(b, rpc.replyTo, true)
	r.consume(b, rpc.replyTo, func(d amqp.Delivery) {
		rpc.mu.Lock()
		c := rpc.waiting[d.CorrelationId]
		delete(rpc.waiting, d.CorrelationId)
		rpc.mu.Unlock()
		if c != nil {
			c <- d.Body
		}
		_ = d.Ack(false)
	})
	return rpc
}

func (rpc *rawRPC) call(ctx context.Context, queue string, body []byte) error {
	id := strconv.FormatUint(rpc.ids.Add(1), 36)
	c := make(chan []byte, 1)
	rpc.mu.Lock()
	rpc.waiting[id] = c
	rpc.mu.Unlock()
	publish := rpc.r.publish
	if rpc.fast {
		publish = rpc.r.publishFast
	}
	if err := publish(ctx, queue, amqp.Publishing{CorrelationId: id, ReplyTo: rpc.replyTo, Body: body}); err != nil {
		return err
	}
	select {
	case reply := <-c:
		var e bustest.Echoed
		return json.Unmarshal(reply, &e)
	case <-ctx.Done():
		rpc.mu.Lock()
		delete(rpc.waiting, id)
		rpc.mu.Unlock()
		return ctx.Err()
	}
}

func testingGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }

func benchPublishers() int {
	if v, err := strconv.Atoi(os.Getenv("BENCH_PUBLISHERS")); err == nil {
		return v
	}
	return 4
}
