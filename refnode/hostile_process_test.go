package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

// field is one member of a hand-built JSON object: its key and raw value.
type field struct{ k, v string }

// obj builds a JSON object from fields in order, whatever they hold.
func obj(fs ...field) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(f.k))
		b.WriteByte(':')
		b.WriteString(f.v)
	}
	b.WriteByte('}')
	return b.String()
}

// js is s as a JSON string.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// hostileMsg is one message the test publishes and what must come of it.
type hostileMsg struct {
	class string
	queue string // "" for api.portal through the API entry
	body  []byte
	corr  string
	// want is the reply codes allowed ("ok" for a reply without error);
	// nil means no reply may be expected (no usable reply address, or one
	// that is not a reply queue).
	want []string
}

// TestHostileInput publishes malformed envelopes of every class to a live
// 3-node cluster, straight to api.portal (through the API entry) and to
// each node's service queues, interleaved with valid calls. No node may
// lose its broker connection; every malformed request with a reply
// address gets a typed error reply (with the code its class calls for);
// nothing is redelivered in a loop; every valid call succeeds (sent
// again, as a caller would, when it failed as not_sent because the
// test's own connection was reconnecting: nothing reached a node); a node's
// memory stays within prefetch x the size limit above its baseline and
// comes back to baseline + 20 MiB within 30 s.
func TestHostileInput(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Timeout: 170 * time.Second})
	testStart := time.Now()
	tag := randomHex(4)
	pc := newProcCluster(t, ctx, broker, onSQLite, "hostile")
	prefix := pc.prefix
	nodes, ids, r := pc.startSQLite(t, ctx, []string{"A", "B", "C"}, []string{"REFNODE_BUS=" + broker})
	cl := newClient(t, ctx, broker, prefix)

	// What the valid calls and the hostile copies are about.
	img, err := service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: message.NewUUID(), Name: "hostile-" + tag})
	require.NoError(t, err)
	for range 3 {
		_, err := service.Call[api.HostReply](ctx, cl, api.AddHost{UUID: message.NewUUID(), Address: "10.1.0.1"})
		require.NoError(t, err)
	}
	var vms []string
	for range 6 {
		rep, err := service.Call[api.VmCreated](ctx, cl, api.CreateVm{ImageUUID: img.Image.UUID})
		require.NoError(t, err)
		vms = append(vms, rep.VM.UUID)
	}

	// Valid traffic, before (the warm-up) and during the hostile phase.
	var okCalls, failedCalls, resent atomic.Int64
	var failures sync.Map
	valid := func(ctx context.Context, i int) {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		add := api.AddImage{UUID: message.NewUUID(), Name: "valid"}
		var err error
		for {
			switch i % 4 {
			case 0, 1:
				_, err = service.Call[api.VmReply](ctx, cl, api.GetVm{UUID: vms[i%len(vms)]})
			case 2:
				_, err = service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: img.Image.UUID})
			case 3:
				_, err = service.Call[api.ImageReply](ctx, cl, add)
			}
			// Nothing was sent: the test's own broker connection was
			// reconnecting (this process, building 50 MB messages under
			// -race, can pause past the AMQP heartbeat). A caller sends
			// such a call again; the nodes never saw it.
			if !errors.Is(err, message.ErrNotSent) || ctx.Err() != nil {
				break
			}
			resent.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			failedCalls.Add(1)
			failures.Store(err.Error(), true)
			return
		}
		okCalls.Add(1)
	}
	for i := range 200 {
		valid(ctx, i)
	}
	require.Zero(t, failedCalls.Load(), "warm-up calls fail")
	okCalls.Store(0)

	// Baseline memory: each node's RSS, sampled for a second after the
	// warm-up (the median).
	rss := func(c *child) uint64 {
		v, err := rssOf(c.cmd.Process.Pid)
		require.NoError(t, err)
		return v
	}
	baseline := map[string]uint64{}
	for _, c := range nodes {
		var samples []uint64
		for range 10 {
			samples = append(samples, rss(c))
			time.Sleep(100 * time.Millisecond)
		}
		slices.Sort(samples)
		baseline[c.label] = samples[len(samples)/2]
	}
	peak := map[string]uint64{}
	var peakMu sync.Mutex
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var samplers sync.WaitGroup
	for _, c := range nodes {
		samplers.Go(func() {
			for sampleCtx.Err() == nil {
				if v, err := rssOf(c.cmd.Process.Pid); err == nil {
					peakMu.Lock()
					peak[c.label] = max(peak[c.label], v)
					peakMu.Unlock()
				}
				select {
				case <-sampleCtx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	defer stopSampling()

	// The hostile client: its own connection, its own reply queue.
	hc := newWireClient(t, broker, "refnode hostile test", prefix+".reply.hostile-"+tag)
	ch, replyQueue := hc.ch, hc.replyQueue

	msgs := hostileMessages(prefix, replyQueue, ids, vms, img.Image.UUID)
	classes := map[string]bool{}
	for _, m := range msgs {
		classes[m.class] = true
	}
	t.Logf("cluster ready, %d hostile messages of %d classes to send, %s after the test began", len(msgs), len(classes), time.Since(testStart).Round(time.Millisecond))

	// Valid calls run throughout the hostile phase, 4 at a time.
	validCtx, stopValid := context.WithCancel(ctx)
	var callers sync.WaitGroup
	for w := range 4 {
		callers.Go(func() {
			for i := w; validCtx.Err() == nil; i += 4 {
				valid(ctx, i)
			}
		})
	}

	entry := prefix + ".api"
	portal := prefix + ".message.api.portal"
	sendStart := time.Now()
	for _, m := range msgs {
		exchange, key := entry, portal
		if m.queue != "" {
			exchange, key = "", m.queue
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false,
			amqp.Publishing{Body: m.body, ContentType: "application/json"})
		require.NoError(t, err, "publish %s", m.class)
		confirmed, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, confirmed, "the broker took the %s message", m.class)
	}
	sendEnd := time.Now()
	t.Logf("published %d hostile messages in %s", len(msgs), sendEnd.Sub(sendStart).Round(time.Millisecond))

	// Every message with a reply address is answered, with its class's code.
	answered := func() (missing []string) {
		for _, m := range msgs {
			if m.want != nil && len(hc.replies(m.corr)) == 0 {
				missing = append(missing, m.class+"/"+m.corr)
			}
		}
		return missing
	}
	require.NoError(t, poll(ctx, func() error {
		if missing := answered(); len(missing) > 0 {
			return fmt.Errorf("%d requests unanswered, e.g. %v", len(missing), missing[:min(5, len(missing))])
		}
		return nil
	}), "every malformed request with a reply address gets a reply")
	t.Logf("every request with a reply address answered %s after the last publish", time.Since(sendEnd).Round(time.Millisecond))
	stopValid()
	callers.Wait()
	stopSampling()
	samplers.Wait()

	// Nothing loops: once quiet, no node refuses anything more, and the
	// cluster's queues are empty.
	rejected := func() (n uint64) {
		for _, c := range nodes {
			st, err := c.status()
			require.NoError(t, err)
			n += st.Bus.Rejected
		}
		return n
	}
	r1 := rejected()
	time.Sleep(2 * time.Second) // a quiet interval: what must not happen in it is the point
	r2 := rejected()
	assert.Equal(t, r1, r2, "messages refused while no one sends: something is redelivered in a loop")
	// Every queue empties: each must be seen empty within 10 s (a
	// message held by a node, or given back in a loop, keeps it from
	// ever being empty).
	held := map[string]int{}
	quiet := time.Now()
	emptyCtx, cancelEmpty := context.WithTimeout(ctx, 10*time.Second)
	err = pollEvery(emptyCtx, 500*time.Millisecond, func() error {
		depths, ok, err := queueDepths(emptyCtx, broker, prefix)
		if !ok || err != nil {
			return nil // no rabbitmqctl here: nothing to see
		}
		for q, n := range depths {
			if q == replyQueue || strings.HasSuffix(q, ".dead") {
				continue
			}
			if _, seen := held[q]; !seen || held[q] > 0 {
				if n > 0 && !seen {
					t.Logf("queue %s holds %d messages %s after the quiet interval", q, n, time.Since(quiet).Round(time.Millisecond))
				}
				held[q] = n
			}
		}
		for q, n := range held {
			if n > 0 {
				return fmt.Errorf("queue %s still holds %d messages", q, n)
			}
		}
		return nil
	})
	cancelEmpty()
	if !assert.NoError(t, err, "a queue held messages for 10 s after the hostile phase") {
		if out, ok, err := rabbitmqctl(ctx, broker, "list_queues", "name", "messages_ready", "messages_unacknowledged", "consumers"); ok && err == nil {
			t.Logf("queues (name, ready, unacknowledged, consumers):\n%s", out)
		}
		for _, c := range nodes {
			if st, err := c.status(); err == nil {
				t.Logf("node %s bus: %+v", c.label, st.Bus)
			}
		}
	}

	// The outcome, per class.
	type tally struct {
		sent, withAddress, answered int
		codes                       map[string]int
	}
	per := map[string]*tally{}
	var order []string
	for _, m := range msgs {
		tl := per[m.class]
		if tl == nil {
			tl = &tally{codes: map[string]int{}}
			per[m.class] = tl
			order = append(order, m.class)
		}
		tl.sent++
		got := hc.replies(m.corr)
		if m.want != nil {
			tl.withAddress++
			if len(got) > 0 {
				tl.answered++
			}
			for _, code := range got {
				assert.Contains(t, m.want, code, "class %s (%s): reply code", m.class, m.corr)
			}
		}
		for _, code := range got {
			tl.codes[code]++
		}
	}
	var report strings.Builder
	fmt.Fprintf(&report, "%-34s %5s %8s %8s  %s\n", "class", "sent", "address", "answered", "reply codes")
	for _, class := range order {
		tl := per[class]
		var codes []string
		for c, n := range tl.codes {
			codes = append(codes, fmt.Sprintf("%s %d", c, n))
		}
		sort.Strings(codes)
		fmt.Fprintf(&report, "%-34s %5d %8d %8d  %s\n", class, tl.sent, tl.withAddress, tl.answered, strings.Join(codes, ", "))
	}
	var sent, withAddress, answeredN int
	for _, tl := range per {
		sent, withAddress, answeredN = sent+tl.sent, withAddress+tl.withAddress, answeredN+tl.answered
	}
	fmt.Fprintf(&report, "%-34s %5d %8d %8d\n", "total", sent, withAddress, answeredN)
	t.Logf("hostile messages per class:\n%s", report.String())
	assert.Zero(t, hc.undecodable.Load(), "replies that do not decode")

	// No node lost its broker connection; the rings never changed.
	for _, c := range nodes {
		st, err := c.status()
		require.NoError(t, err)
		if !assert.Zero(t, st.ConnectionsLost, "node %s lost its broker connection", c.label) {
			_, errOut := c.output() // why: the transport logs each loss and drop
			for _, line := range strings.Split(errOut, "\n") {
				if strings.Contains(line, "connection to the broker") || strings.Contains(line, "reconnect") || strings.Contains(line, "paused") {
					t.Logf("node %s: %s", c.label, line)
				}
			}
		}
		assert.Equal(t, "connected", st.Transport, "node %s", c.label)
		assert.Equal(t, r.Fingerprint().String(), st.Ring.Fingerprint, "node %s's ring changed", c.label)
		t.Logf("node %s: connections lost %d, refused %d, late %d", c.label, st.ConnectionsLost, st.Bus.Rejected, st.Bus.Late)
	}

	// Valid calls: all succeeded.
	var fails []string
	failures.Range(func(k, _ any) bool { fails = append(fails, k.(string)); return true })
	t.Logf("valid calls during the hostile phase: %d ok, %d failed %v; %d sent again after not_sent (the test's own connection reconnecting)", okCalls.Load(), failedCalls.Load(), fails, resent.Load())
	assert.Zero(t, failedCalls.Load(), "valid calls failed: %v", fails)
	assert.Positive(t, okCalls.Load())

	// Memory: within prefetch x the size limit above the baseline, then
	// back to the baseline + 20 MiB within 30 s.
	const prefetch = 32 // bus.Config.Prefetch's default, which refnode keeps
	bound := uint64(prefetch) * message.DefaultMaxSize
	for _, c := range nodes {
		t.Logf("node %s RSS: baseline %.1f MiB, peak %.1f MiB (bound +%.0f MiB)", c.label,
			mib(baseline[c.label]), mib(peak[c.label]), mib(bound))
		assert.LessOrEqual(t, peak[c.label], baseline[c.label]+bound, "node %s's memory", c.label)
	}
	for _, c := range nodes {
		t.Logf("node %s RSS %.1f MiB %s after the last hostile publish", c.label, mib(rss(c)), time.Since(sendEnd).Round(time.Millisecond))
	}
	back := map[string]time.Duration{}
	err = poll(ctx, func() error {
		for _, c := range nodes {
			if _, ok := back[c.label]; ok {
				continue
			}
			if v := rss(c); v <= baseline[c.label]+20<<20 {
				back[c.label] = time.Since(sendEnd)
				continue
			}
			if time.Since(sendEnd) > 30*time.Second {
				return nil // reported below
			}
			return fmt.Errorf("node %s not back at its baseline", c.label)
		}
		return nil
	})
	require.NoError(t, err)
	for _, c := range nodes {
		d, ok := back[c.label]
		assert.True(t, ok, "node %s's RSS %.1f MiB 30 s after the last hostile publish, baseline %.1f MiB", c.label, mib(rss(c)), mib(baseline[c.label]))
		t.Logf("node %s within baseline + 20 MiB %s after the last hostile publish (now %.1f MiB)", c.label, d.Round(time.Millisecond), mib(rss(c)))
	}
	t.Logf("whole test %s", time.Since(testStart).Round(time.Millisecond))
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// rssOf returns a process's resident set size, from /proc.
func rssOf(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// queueDepths lists the messages in each queue of prefix (rabbitmqctl).
func queueDepths(ctx context.Context, brokerURL, prefix string) (map[string]int, bool, error) {
	out, ok, err := rabbitmqctl(ctx, brokerURL, "list_queues", "name", "messages")
	if !ok || err != nil {
		return nil, ok, err
	}
	qs := make(map[string]int)
	for _, line := range strings.Split(out, "\n") {
		var name string
		var n int
		if _, err := fmt.Sscanf(line, "%s %d", &name, &n); err == nil && strings.HasPrefix(name, prefix+".") {
			qs[name] = n
		}
	}
	return qs, true, nil
}

// hostileMessages builds the malformed (and a few odd but valid)
// envelopes, each class sent to api.portal and to a service queue of
// every node.
func hostileMessages(prefix, replyQueue string, nodes, vms []string, image string) []hostileMsg {
	var out []hostileMsg
	n := 0
	vm := vms[0]
	// add sends one message built by body to api.portal and to svc's
	// queue on each node; body gets the service id and correlation id.
	add := func(class, svc string, want []string, body func(serviceID, corr string) []byte) {
		for i := -1; i < len(nodes); i++ {
			n++
			corr := fmt.Sprintf("hostile-%d", n)
			m := hostileMsg{class: class, corr: corr, want: want}
			serviceID := bus.APIPortal
			if i >= 0 {
				serviceID = svc + "." + nodes[i]
				m.queue = prefix + ".message." + serviceID
			}
			m.body = body(serviceID, corr)
			out = append(out, m)
		}
	}
	// request builds a request envelope: the base fields, then extra.
	request := func(typ string, extra ...field) func(serviceID, corr string) []byte {
		return func(serviceID, corr string) []byte {
			fs := []field{{"id", js(message.NewUUID())}, {"kind", js("request")}, {"type", js(typ)},
				{"service_id", js(serviceID)}, {"correlation_id", js(corr)}, {"reply_to", js(replyQueue)}, {"timeout_ns", "10000000000"}}
			return []byte(obj(append(fs, extra...)...))
		}
	}
	raw := func(b []byte) func(string, string) []byte { return func(string, string) []byte { return b } }
	getVM := func(extra ...field) func(string, string) []byte {
		return request("refnode.v1.GetVm", append([]field{{"resource_uuid", js(vm)}, {"body", obj(field{"uuid", js(vm)})}}, extra...)...)
	}
	none := []string(nil)
	badRequest := []string{"bad_request"}

	// Not an envelope at all: no reply address to answer.
	add("empty body", "vmInstance", none, raw(nil))
	add("not JSON", "vmInstance", none, raw([]byte("hello, cluster")))
	add("JSON, not an object", "vmInstance", none, raw([]byte(`[{"kind":"request"}]`)))
	add("invalid UTF-8, no address", "vmInstance", none, raw([]byte("{\"kind\":\"req\xffuest\"}")))
	// Malformed envelopes that name a reply address.
	add("invalid UTF-8", "vmInstance", badRequest, request("refnode.v1.GetVm", field{"source", "\"\xff\xfe\""}, field{"body", obj(field{"uuid", js(vm)})}))
	add("deep nesting (20000)", "vmInstance", badRequest, request("refnode.v1.GetVm", field{"body", strings.Repeat("[", 20000) + strings.Repeat("]", 20000)}))
	add("deep nesting (200)", "vmInstance", []string{"bad_request", "invalid_uuid"}, request("refnode.v1.GetVm", field{"body", strings.Repeat("[", 200) + strings.Repeat("]", 200)}))
	add("unknown type", "vmInstance", []string{"unknown_message"}, request("refnode.v1.NoSuchThing", field{"body", "{}"}))
	add("unregistered type (a real Go type)", "vmInstance", []string{"unknown_message"}, request("refnode.v1.Handling", field{"body", "{}"}))
	add("malformed type name", "vmInstance", badRequest, request("no spaces allowed", field{"body", "{}"}))
	add("missing type", "vmInstance", badRequest, func(serviceID, corr string) []byte {
		return []byte(obj(field{"id", js(message.NewUUID())}, field{"kind", js("request")}, field{"service_id", js(serviceID)},
			field{"correlation_id", js(corr)}, field{"reply_to", js(replyQueue)}, field{"body", "{}"}))
	})
	add("missing id", "vmInstance", badRequest, func(serviceID, corr string) []byte {
		return []byte(obj(field{"kind", js("request")}, field{"type", js("refnode.v1.GetVm")}, field{"service_id", js(serviceID)},
			field{"correlation_id", js(corr)}, field{"reply_to", js(replyQueue)}, field{"body", obj(field{"uuid", js(vm)})}))
	})
	add("id of 300 bytes", "vmInstance", badRequest, func(serviceID, corr string) []byte {
		return []byte(obj(field{"id", js(strings.Repeat("i", 300))}, field{"kind", js("request")}, field{"type", js("refnode.v1.GetVm")},
			field{"service_id", js(serviceID)}, field{"correlation_id", js(corr)}, field{"reply_to", js(replyQueue)},
			field{"body", obj(field{"uuid", js(vm)})}))
	})
	add("newer protocol version", "vmInstance", badRequest, func(serviceID, corr string) []byte {
		return append([]byte(`{"protocol":2,`), getVM()(serviceID, corr)[1:]...)
	})
	for _, to := range []string{"-5", "1e30", "1.5", `"10"`, "99999999999999999999"} {
		add("bad timeout_ns "+to, "vmInstance", badRequest, func(serviceID, corr string) []byte {
			return bytesReplace(getVM()(serviceID, corr), `"timeout_ns":10000000000`, `"timeout_ns":`+to)
		})
	}
	add("bad deadline_ns", "vmInstance", badRequest, getVM(field{"deadline_ns", `"tomorrow"`}))
	add("header not a string", "vmInstance", badRequest, getVM(field{"headers", `{"h":1}`}))
	add("header an object", "vmInstance", badRequest, getVM(field{"headers", `{"h":{"x":"y"}}`}))
	add("empty header name", "vmInstance", badRequest, getVM(field{"headers", `{"":"x"}`}))
	// A request just under the size limit whose headers, echoed into
	// its reply, would make the reply too large: answered without them.
	add("headers: request just under the limit", "vmInstance", []string{"internal"}, func(serviceID, corr string) []byte {
		short := getVM(field{"headers", obj(field{"big", js("")})})(serviceID, corr)
		pad := message.DefaultMaxSize - 16 - len(short)
		return getVM(field{"headers", obj(field{"big", js(strings.Repeat("h", pad))})})(serviceID, corr)
	})
	for range 2 {
		add("50 MB message", "vmInstance", []string{"too_large"}, getVM(field{"padding", js(strings.Repeat("p", 50<<20))}))
	}
	add("body a string", "vmInstance", badRequest, request("refnode.v1.GetVm", field{"resource_uuid", js(vm)}, field{"body", js("vm")}))
	add("body a wrong type", "vmInstance", badRequest, request("refnode.v1.GetVm", field{"resource_uuid", js(vm)}, field{"body", `{"uuid":5}`}))
	add("body missing", "vmInstance", []string{"bad_request", "invalid_uuid"}, request("refnode.v1.GetVm"))
	add("resource not the body's", "vmInstance", []string{"bad_request", "not_owner"},
		request("refnode.v1.GetVm", field{"resource_uuid", js(vms[1])}, field{"body", obj(field{"uuid", js(vm)})}))
	add("invalid resource UUID", "vmInstance", []string{"invalid_uuid"}, request("refnode.v1.GetVm", field{"resource_uuid", js("xyz")}, field{"body", `{"uuid":"xyz"}`}))
	add("invalid UUID in the body", "vmInstance", []string{"invalid_uuid"}, request("refnode.v1.GetVm", field{"body", `{"uuid":"xyz"}`}))
	// Domain limits: answered bad_request naming the field (or not_owner
	// where a node's queue gets a message about another's resource).
	add("CreateVm cpus -1", "vmInstance", badRequest, request("refnode.v1.CreateVm", field{"body", obj(field{"image_uuid", js(image)}, field{"cpus", "-1"})}))
	add("CreateVm memory 99999999999999 MB", "vmInstance", badRequest, request("refnode.v1.CreateVm", field{"body", obj(field{"image_uuid", js(image)}, field{"memory_mb", "99999999999999"})}))
	add("AddImage size -5 MB", "image", []string{"bad_request", "not_owner"}, func(serviceID, corr string) []byte {
		u := message.NewUUID()
		return request("refnode.v1.AddImage", field{"resource_uuid", js(u)}, field{"body", obj(field{"uuid", js(u)}, field{"size_mb", "-5"})})(serviceID, corr)
	})
	add("AddHost name of 10 KB", "host", []string{"bad_request", "not_owner"}, func(serviceID, corr string) []byte {
		u := message.NewUUID()
		return request("refnode.v1.AddHost", field{"resource_uuid", js(u)}, field{"body", obj(field{"uuid", js(u)}, field{"name", js(strings.Repeat("n", 10<<10))})})(serviceID, corr)
	})
	// Reply addresses that are not this client's reply queue: never
	// answered there, and no node may write into them or lose its
	// connection over them (a 256-byte one used to close it).
	add("reply_to of 256 bytes", "vmInstance", none, getVM(field{"reply_to", js(prefix + ".reply." + strings.Repeat("r", 256-len(prefix)-7))}))
	add("reply_to of 255 bytes, no such queue", "vmInstance", none, getVM(field{"reply_to", js(prefix + ".reply." + strings.Repeat("r", 255-len(prefix)-7))}))
	add("reply_to a service queue", "vmInstance", none, getVM(field{"reply_to", js(prefix + ".message.vmInstance." + nodes[0])}))
	add("reply_to api.portal", "vmInstance", none, getVM(field{"reply_to", js(prefix + ".message.api.portal")}))
	// Wrong kinds: nothing to answer.
	for _, kind := range []string{"reply", "event", "bogus"} {
		add("kind "+kind, "vmInstance", none, func(serviceID, corr string) []byte {
			return bytesReplace(getVM()(serviceID, corr), `"kind":"request"`, `"kind":"`+kind+`"`)
		})
	}
	add("forged NodeLeft event", "vmInstance", none, func(serviceID, corr string) []byte {
		return []byte(obj(field{"id", js(message.NewUUID())}, field{"kind", js("event")}, field{"type", js(wire.TypeNodeLeft)},
			field{"body", obj(field{"node", js(nodes[0])}, field{"epoch", "9223372036854775807"}, field{"reason", js("evicted")})}))
	})
	add("one-way with garbage", "vmInstance", none, func(serviceID, corr string) []byte {
		return bytesReplace(request("no spaces allowed", field{"body", "{}"})(serviceID, corr), `"kind":"request"`, `"kind":"send"`)
	})
	// The bus's reserved drain header: refused on a request; a forged
	// marker with no deadline is dropped, not given back for good.
	add("drain header on a request", "vmInstance", badRequest, getVM(field{"headers", `{"cloudbus-drain":"x"}`}))
	add("forged drain marker, no deadline", "vmInstance", none, func(serviceID, corr string) []byte {
		return []byte(obj(field{"id", js(message.NewUUID())}, field{"kind", js("send")}, field{"type", js(message.TypeEmpty)},
			field{"service_id", js(serviceID)}, field{"source", js(nodes[1])}, field{"headers", `{"cloudbus-drain":"forged"}`}))
	})
	// Odd but valid: answered ok (or not_owner from a non-owner's queue).
	okOrNotOwner := []string{"ok", "not_owner"}
	add("upper-case resource UUID", "vmInstance", okOrNotOwner,
		request("refnode.v1.GetVm", field{"resource_uuid", js(strings.ToUpper(vm))}, field{"body", obj(field{"uuid", js(vm)})}))
	add("dashed upper-case UUIDs", "vmInstance", okOrNotOwner,
		request("refnode.v1.GetVm", field{"resource_uuid", js(dashed(strings.ToUpper(vm)))}, field{"body", obj(field{"uuid", js(dashed(strings.ToUpper(vm)))})}))
	add("unknown fields", "vmInstance", okOrNotOwner, getVM(field{"zzz_future_field", `{"a":[1,2,3]}`}))
	// Duplicate ids: one AddImage envelope published twice under one id,
	// with two correlation ids; both answered, alike.
	dupID, dupImage := message.NewUUID(), message.NewUUID()
	for range 2 {
		add("duplicate id (AddImage)", "image", okOrNotOwner, func(serviceID, corr string) []byte {
			return []byte(obj(field{"id", js(dupID)}, field{"kind", js("request")}, field{"type", js("refnode.v1.AddImage")},
				field{"service_id", js(serviceID)}, field{"resource_uuid", js(dupImage)}, field{"correlation_id", js(corr)},
				field{"reply_to", js(replyQueue)}, field{"timeout_ns", "10000000000"}, field{"body", obj(field{"uuid", js(dupImage)}, field{"name", js("dup")})}))
		})
	}
	return out
}

func bytesReplace(b []byte, old, new string) []byte {
	return []byte(strings.Replace(string(b), old, new, 1))
}

// dashed writes a 32-digit UUID in the 8-4-4-4-12 form.
func dashed(u string) string {
	return u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
}
