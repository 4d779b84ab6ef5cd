package nodekit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/service"
)

// Health is the JSON body of GET /livez and GET /readyz: the verdict and
// every check behind it, passed or not. Each check reads state the node
// already has; no request makes a round trip to the database or the
// broker.
type Health struct {
	// Status is "live" or "not live" (GET /livez), "ready" or "not
	// ready" (GET /readyz).
	Status string `json:"status"`
	// Checks are the checks, in a fixed order.
	Checks []Check `json:"checks"`
}

// Check is one check of [Health].
type Check struct {
	// Name names the check: heartbeat_loop (GET /livez); state, lease,
	// store, transport, ring (GET /readyz).
	Name string `json:"name"`
	// OK reports whether it passed.
	OK bool `json:"ok"`
	// Detail says what the check saw.
	Detail string `json:"detail"`
}

// OK reports whether every check passed.
func (h Health) OK() bool {
	for _, c := range h.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// healthInput is what the checks read: a snapshot of the node's state,
// taken without I/O, so that the checks are pure functions of it.
type healthInput struct {
	now          time.Time
	state        service.State
	leaseExpired bool // service.Node.LeaseExpired
	transport    driver.TransportState
	ring         []string // the ring's members, sorted
	store        service.StoreView
	hb           heartbeat.Config // defaults filled in
	// beatsSeen: the Admin sees every beat attempt (a node opened by
	// Open); then beatEnded is when the last ended (zero: none yet) and
	// failing how many failed since the last success.
	beatsSeen bool
	beatEnded time.Time
	failing   int
	// ringDiffSince is when the readiness checks first saw the ring
	// differ from the store's live nodes as they differ now; zero if
	// they agree.
	ringDiffSince time.Time
}

// stuckAfter is how long the heartbeat loop may go without ending a
// beat attempt before GET /livez calls it stuck: twice the eviction
// threshold. A round is a beat and a read, each bounded by OpTimeout,
// and the evictions it makes; a loop that makes no attempt for that
// long has been evicted by its peers already.
func stuckAfter(hb heartbeat.Config) time.Duration { return 2 * hb.EvictAfter }

// storeGrace is how old the last successful beat may be before GET
// /readyz calls the store unreachable: two intervals and a store call
// (one beat missed, the next under way), at most the lease.
func storeGrace(hb heartbeat.Config) time.Duration {
	return min(2*hb.Interval+hb.OpTimeout, hb.Lease)
}

// ringGrace is how long the ring may differ from the store's live nodes
// before GET /readyz fails: a join or a leave reaches the ring and the
// store at slightly different times, and the node reconciles its ring
// from the store after two reads that differ.
func ringGrace(hb heartbeat.Config) time.Duration { return 2 * hb.Interval }

// liveness is GET /livez: the heartbeat loop is not stuck. Beats that
// fail (the database cut) do not make a node not live: its loop still
// runs; it only fails when the loop stopped making attempts.
func liveness(in healthInput) Health {
	c := Check{Name: "heartbeat_loop", OK: true}
	switch {
	case !in.beatsSeen:
		c.Detail = "not observed: the node's heartbeat store is not the kit's (NewAdmin)"
	case in.state != service.StateServing:
		c.Detail = "the node is " + in.state.String() + ": its heartbeat loop runs only while it serves"
	default:
		// The join's registration counts as the first attempt: the loop
		// waits up to an interval before its first beat.
		last := in.beatEnded
		if in.store.LastBeat.After(last) {
			last = in.store.LastBeat
		}
		age := in.now.Sub(last)
		switch {
		case last.IsZero():
			c.Detail = "no beat attempted yet"
		case age > stuckAfter(in.hb):
			c.OK = false
			c.Detail = fmt.Sprintf("stuck: no beat attempt ended for %s (limit %s, twice -evict-after)", round(age), stuckAfter(in.hb))
		default:
			c.Detail = fmt.Sprintf("last beat attempt ended %s ago", round(age))
			if in.failing > 0 {
				c.Detail += fmt.Sprintf("; %d failed in a row (the loop runs: the store is the problem, see /readyz)", in.failing)
			}
		}
	}
	return verdict([]Check{c}, "live")
}

// readiness is GET /readyz: the node serves, its lease holds, its last
// beat is recent, its broker connection is up, and its ring holds the
// live nodes of its last read of the heartbeat store.
func readiness(in healthInput) Health {
	checks := []Check{{Name: "state", OK: in.state == service.StateServing, Detail: in.state.String()}}

	beatAge := in.now.Sub(in.store.LastBeat)
	lease := Check{Name: "lease", OK: !in.leaseExpired}
	switch {
	case in.store.LastBeat.IsZero():
		lease.Detail = "not joined"
	case in.leaseExpired:
		lease.Detail = fmt.Sprintf("expired: last successful beat %s ago, lease %s; the node refuses messages about resources", round(beatAge), in.hb.Lease)
	default:
		lease.Detail = fmt.Sprintf("holds: last successful beat %s ago, lease %s", round(beatAge), in.hb.Lease)
	}
	checks = append(checks, lease)

	store := Check{Name: "store"}
	switch {
	case in.store.LastBeat.IsZero():
		store.Detail = "no successful beat yet"
	case beatAge > storeGrace(in.hb):
		store.Detail = fmt.Sprintf("unreachable: last successful beat %s ago (limit %s)", round(beatAge), storeGrace(in.hb))
		if in.failing > 0 {
			store.Detail += fmt.Sprintf(", %d failed in a row", in.failing)
		}
	default:
		store.OK = true
		store.Detail = fmt.Sprintf("last successful beat %s ago", round(beatAge))
	}
	checks = append(checks, store)

	checks = append(checks, Check{Name: "transport", OK: in.transport == driver.TransportConnected, Detail: in.transport.String()})

	rc := Check{Name: "ring"}
	switch {
	case in.store.Reads == 0:
		rc.Detail = "no read of the heartbeat store yet"
	case slices.Equal(in.ring, in.store.Live):
		rc.OK = true
		rc.Detail = fmt.Sprintf("%s, as in the heartbeat store", nodes(len(in.ring)))
	default:
		age := in.now.Sub(in.ringDiffSince)
		rc.OK = age <= ringGrace(in.hb)
		rc.Detail = fmt.Sprintf("the ring holds %s, the heartbeat store's live nodes are %s (for %s; limit %s)",
			strings.Join(in.ring, ","), strings.Join(in.store.Live, ","), round(age), ringGrace(in.hb))
	}
	checks = append(checks, rc)
	return verdict(checks, "ready")
}

// verdict returns the Health of checks: status word, or "not " word.
func verdict(checks []Check, word string) Health {
	h := Health{Status: word, Checks: checks}
	if !h.OK() {
		h.Status = "not " + word
	}
	return h
}

// round rounds d for the details.
func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// healthInput takes the snapshot the checks read; it remembers when the
// ring started to differ from the store.
func (a *Admin) healthInput() healthInput {
	n := a.node
	in := healthInput{
		now: time.Now(), state: n.State(), leaseExpired: n.LeaseExpired(), transport: a.tr.State(),
		ring: n.Members(), store: n.StoreView(), hb: n.Heartbeat(),
	}
	slices.Sort(in.ring)
	if a.beats != nil {
		in.beatsSeen = true
		in.beatEnded, in.failing = a.beats.last()
	}
	key := ""
	if in.store.Reads > 0 && !slices.Equal(in.ring, in.store.Live) {
		key = strings.Join(in.ring, ",") + "|" + strings.Join(in.store.Live, ",")
	}
	a.mu.Lock()
	if key != a.ringDiff {
		a.ringDiff, a.ringDiffSince = key, in.now
	}
	in.ringDiffSince = a.ringDiffSince
	a.mu.Unlock()
	return in
}

// serveHealth writes h as JSON: 200 if every check passed, 503 if not.
func serveHealth(w http.ResponseWriter, h Health) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !h.OK() {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(h)
}

// Liveness returns what GET /livez answers: live unless the node serves
// and its heartbeat loop has ended no beat attempt, failed ones
// included, for twice the eviction threshold. A node whose beats fail
// (its database cut) stays live: restarting it would not help.
func (a *Admin) Liveness() Health { return liveness(a.healthInput()) }

// Readiness returns what GET /readyz answers: ready while the node
// serves (state), its lease holds (lease), its last successful beat is
// at most two intervals and a store call old (store), its broker
// connection is up (transport), and its ring holds the live nodes of its
// last read of the heartbeat store, or has differed from them for at
// most two intervals as these checks saw it (ring).
func (a *Admin) Readiness() Health { return readiness(a.healthInput()) }
