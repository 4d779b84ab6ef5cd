package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/message"
)

// printer writes the demo's output for a person seeing the project for
// the first time: node labels instead of UUIDs in prose, full queue names.
type printer struct {
	w       io.Writer
	verbose bool
	labels  map[string]string // node UUID -> "A", "B", …
}

func newPrinter(w io.Writer, verbose bool) *printer {
	return &printer{w: w, verbose: verbose, labels: make(map[string]string)}
}

// short returns the first 8 digits of a UUID and an ellipsis.
func short(id string) string {
	if len(id) > 8 {
		return id[:8] + "…"
	}
	return id
}

// label returns the node's letter, or its short UUID if unknown.
func (p *printer) label(node string) string {
	if l, ok := p.labels[node]; ok {
		return l
	}
	return short(node)
}

// labelList returns "A", "A and C", "A, B and C".
func (p *printer) labelList(nodes []string) string {
	var ls []string
	for _, n := range nodes {
		ls = append(ls, p.label(n))
	}
	slices.Sort(ls)
	ls = slices.Compact(ls)
	if len(ls) < 2 {
		return strings.Join(ls, "")
	}
	return strings.Join(ls[:len(ls)-1], ", ") + " and " + ls[len(ls)-1]
}

func (p *printer) f(format string, args ...any) { fmt.Fprintf(p.w, format+"\n", args...) }

func (p *printer) section(lines ...string) {
	p.f("")
	for _, l := range lines {
		p.f("%s", l)
	}
}

func (p *printer) intro(r *demoReport) {
	p.f("refnode demo: %d management nodes in one process, on the in-memory bus and heartbeat store.", len(r.nodes))
	p.f("Every node hosts every service; nodes share only heartbeat records and a ring of node UUIDs.")
	p.section("Nodes (each gets a fresh version-4 UUID when it starts):")
	var all []string
	for _, n := range r.nodes {
		p.f("  %s  %s", n.label, n.uuid)
		all = append(all, n.uuid)
	}
	p.section("Queues the nodes registered, <prefix>.message.<service>.<nodeUUID> as in the design:")
	for _, n := range r.nodes {
		for _, q := range n.queues {
			p.f("  %s  %s", n.label, q)
		}
	}
	p.f("  *  %s  (one queue shared by %s: competing consumers)", r.portal, p.labelList(all))
	if len(r.others) > 0 {
		p.f("  (each node also has %s.message.cloudbus-membership.<uuid>, for leave confirmations)", r.prefix)
	}
}

// op prints one operation line.
func (p *printer) op(op opRecord) {
	head := fmt.Sprintf("  %-9s %-5s %s", op.msg, op.kind, short(op.resource))
	if op.err != nil {
		target := op.owner
		if target == "" {
			target = op.sender
		}
		why := op.err.Error()
		if !p.verbose {
			if i := strings.LastIndex(why, ": "); i >= 0 {
				why = why[i+2:]
			}
			why = fmt.Sprintf("%s: %s", message.CodeOf(op.err), why)
		}
		p.f("%s  → sent to node %s (%s): failed (%s)", head, p.label(target), op.route, why)
		return
	}
	var tail []string
	if op.state != "" {
		tail = append(tail, op.state)
	}
	if op.detail != "" {
		tail = append(tail, op.detail)
	}
	if op.portal != "" {
		tail = append(tail, "portal "+p.label(op.portal))
	}
	if op.prev != "" {
		tail = append(tail, "was "+p.label(op.prev)+"'s")
	}
	if p.verbose {
		tail = append(tail, op.took.Round(time.Millisecond).String())
	}
	line := fmt.Sprintf("%s  → handled by node %s (%s)", head, p.label(op.handler), op.route)
	if len(tail) > 0 {
		line += "  " + strings.Join(tail, ", ")
	}
	p.f("%s", line)
}

func (p *printer) evicted(k *killRecord) {
	p.f("  %s was evicted %s after it died (threshold: %s since its last beat); rings now hold %s.",
		p.label(k.victim), k.evictedAfter.Round(time.Millisecond), k.threshold, p.labelList(k.after))
}

func (p *printer) takeover(k *killRecord, c *cluster) {
	for _, h := range k.hosts {
		p.f("  host  %s  was %s's → reconnected by node %s, its new ring owner, %s after the eviction",
			short(h.host), p.label(k.victim), p.label(h.managedBy), h.after.Round(time.Millisecond))
	}
	if p.verbose {
		for _, m := range c.live() {
			st := m.svc.Host.Stats()
			p.f("    node %s tracks %d hosts: %d pings, %d reconnects, %d takeovers", m.label, st.Tracked, st.Pings, st.Reconnects, st.Takeovers)
		}
	}
	p.f("  %s's VMs need no reconnecting: messages about them now simply go to their new owners:", p.label(k.victim))
}

func (p *printer) done(r *demoReport) {
	var heirs []string
	for _, h := range r.kill.hosts {
		heirs = append(heirs, h.managedBy)
	}
	for _, op := range r.ops {
		if op.prev != "" {
			heirs = append(heirs, op.handler)
		}
	}
	p.section(fmt.Sprintf("Done in %s. Every message about a resource ran on its ring owner of the moment;",
		r.elapsed.Round(10*time.Millisecond)))
	p.f("%s's hosts and VMs were taken over by %s, and no node handed any state to another.",
		p.label(r.kill.victim), p.labelList(heirs))
}
