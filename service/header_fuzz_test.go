package service

import (
	"strconv"
	"testing"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// FuzzForwardHeaders checks what a node reads from headers and ids that
// any sender sets: a one-way message is forwarded between nodes whose
// rings disagree at most maxForwardHops times, whatever hop count
// (cloudbus-hops) it arrives with; and api.portal's forward id (portalID)
// is always a canonical UUID, the message's own id when that is one, and
// the same for every delivery of one message.
func FuzzForwardHeaders(f *testing.F) {
	for _, s := range []struct{ hops, id string }{
		{"", "932763162d054c04adaab6ab498c9139"},
		{"0", "93276316-2D05-4C04-ADAA-B6AB498C9139"},
		{"2", "urn:uuid:93276316-2d05-4c04-adaa-b6ab498c9139"},
		{"3", "not a uuid"},
		{"+1", ""},
		{"1e3", "\xff"},
		{"99999999999999999999", "932763162d054c04adaab6ab498c913"},
	} {
		f.Add(s.hops, s.id)
	}
	f.Fuzz(func(t *testing.T, hops, id string) {
		r := busx.NewRequest(&wire.Envelope{Headers: map[string]string{wire.HeaderHops: hops}}).(*bus.Request)
		// Forward as the router does, each node raising the count by one,
		// until the count says stop.
		for n := 0; forwardHops(r) < maxForwardHops; n++ {
			if n == maxForwardHops {
				t.Fatalf("a message arriving with %s: %q is forwarded more than %d times", wire.HeaderHops, hops, maxForwardHops)
			}
			busx.EnvelopeOf(r).Headers[wire.HeaderHops] = strconv.Itoa(forwardHops(r) + 1)
		}

		got := portalID(id)
		if !message.IsCanonicalUUID(got) {
			t.Fatalf("portalID(%q) = %q, not a canonical UUID", id, got)
		}
		if again := portalID(id); again != got {
			t.Fatalf("portalID(%q) is %q, then %q", id, got, again)
		}
		if u, err := message.NormalizeUUID(id); err == nil && got != u {
			t.Fatalf("portalID(%q) = %q, want the id itself, %q", id, got, u)
		}
	})
}
