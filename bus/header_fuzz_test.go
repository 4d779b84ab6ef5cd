package bus_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
)

// FuzzEnvelopeAddresses checks what a receiving bus reads from the
// addressing fields of an envelope from outside, for any queue prefix the
// configuration accepts: ValidReplyTo (a request's reply_to) agrees with
// its documented rule (1 to 255 bytes of printable ASCII, a reply queue
// of the bus's prefix or a broker-named queue) and never accepts the name
// of one of the bus's service queues or api.portal's, so a reply cannot
// write into them; and SplitServiceID (a target's service_id) splits
// what ServiceID joins.
//
// The bus's drain marker header (cloudbus-drain) and bus.HeaderRetry are
// not parsed by package bus (the marker's token is compared whole; the
// retry count is read by service.Node's api.portal): see
// service/header_fuzz_test.go.
func FuzzEnvelopeAddresses(f *testing.F) {
	const node = "3694776ab31a45709259254a018913ca"
	for _, s := range []struct{ prefix, addr, service, node string }{
		{"", "cloudbus.reply.3694776ab31a45709259254a018913ca", "vmInstance", node},
		{"", "amq.gen-JzTY20BRgKO-HjmUJj0wLg", "host", node},
		{"", "cloudbus.message.api.portal", "api", "portal"},
		{"", "cloudbus.reply.", "vm", ""},
		{"", "cloudbus.reply.a b", "", node},
		{"", "amq.gen-", "a.b", "c.d"},
		{"prod.eu-1", "prod.eu-1.reply.x", "svc", node},
		{"prod.eu-1", "cloudbus.reply.x", "svc", node},
		{"a", "a.reply.\x7f", "svc", node},
		{"bad prefix", "x", "svc", node},
	} {
		f.Add(s.prefix, s.addr, s.service, s.node)
	}
	net := membus.New()
	tr := net.Transport("fuzz")
	f.Cleanup(func() { _ = tr.Close() })
	buses := map[string]*bus.CloudBus{}
	f.Cleanup(func() {
		for _, b := range buses {
			_ = b.Close()
		}
	})
	open := func(prefix string) *bus.CloudBus {
		if b, ok := buses[prefix]; ok {
			return b
		}
		b, err := bus.Open(context.Background(), bus.Config{Transport: tr, Node: node, Prefix: prefix, Registry: message.NewRegistry()})
		if err != nil {
			return nil
		}
		if len(buses) >= 64 { // keep a few open: opening one per input is slow
			for p, old := range buses {
				_ = old.Close()
				delete(buses, p)
			}
		}
		buses[prefix] = b
		return b
	}
	f.Fuzz(func(t *testing.T, prefix, addr, service, nodePart string) {
		id := bus.ServiceID(service, nodePart)
		svc, n, ok := bus.SplitServiceID(id)
		if service != "" && nodePart != "" && !strings.Contains(nodePart, ".") && id != bus.APIPortal {
			if !ok || svc != service || n != nodePart {
				t.Fatalf("SplitServiceID(ServiceID(%q, %q)) = %q, %q, %v", service, nodePart, svc, n, ok)
			}
		}
		if svc, n, ok := bus.SplitServiceID(addr); ok && (svc == "" || n == "" || strings.Contains(n, ".") || bus.ServiceID(svc, n) != addr) {
			t.Fatalf("SplitServiceID(%q) = %q, %q: want a service, a node without dots, joining back", addr, svc, n)
		}

		b := open(prefix)
		if b == nil {
			return // a prefix the configuration refuses
		}
		if prefix == "" {
			prefix = bus.DefaultPrefix
		}
		if got, want := bus.ValidReplyTo(b, addr), validReplyTo(prefix, addr); got != want {
			t.Fatalf("prefix %q: ValidReplyTo(%q) = %v, its documented rule says %v", prefix, addr, got, want)
		}
		for _, q := range []string{busx.Of(b).QueueName(id), busx.Of(b).QueueName(bus.APIPortal), busx.Of(b).QueueName(addr)} {
			if bus.ValidReplyTo(b, q) {
				t.Fatalf("prefix %q: service queue %q is accepted as a reply address", prefix, q)
			}
		}
	})
}

// validReplyTo is ValidReplyTo's rule as its documentation writes it.
func validReplyTo(prefix, addr string) bool {
	if addr == "" || len(addr) > 255 {
		return false
	}
	for _, c := range []byte(addr) {
		if c < '!' || c > '~' {
			return false
		}
	}
	for _, p := range []string{prefix + ".reply.", "amq.gen-"} {
		if len(addr) > len(p) && strings.HasPrefix(addr, p) {
			return true
		}
	}
	return false
}
