package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The chaos test's report: what ran, and every figure it checks.

// chaosSummary is everything the report shows.
type chaosSummary struct {
	seed                   uint64
	took, load             time.Duration
	windows                []chaosWindow
	rounds                 int
	fig                    chaosFigures
	db                     *dbFigures
	checks                 []historyCheck
	lateStarts             []string
	refusedLate            int
	fenced                 int // writes the fence refused to a node that had lost the resource
	overlaps               overlaps
	backInRings, drainedIn time.Duration
	drainErr               error
	start, end             []nodeResources
	vm                     vmFigures
	vmChecks               []historyCheck
	vmLogs                 vmLogs
	overwrites             []string // repairs that overwrote an acknowledged write
	journalPending         int      // journal entries the nodes held at the end; -1: unknown
	oneWay                 *oneWayFigures
	oneWaySettled          time.Duration // every one-way write accounted for, after the clients stopped
	oneWayErr              error
}

// chaosReport formats the summary as markdown.
func chaosReport(s chaosSummary) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("### Chaos (seed %d)", s.seed)
	p("")
	p("%s in all; %s of load by %d client processes, %d faults in %d round(s). Reproduce the schedule: -chaos.seed=%d",
		s.took.Round(time.Second), s.load.Round(time.Second), chaosClients, len(s.windows), s.rounds, s.seed)
	p("")
	kinds := map[string]int{}
	for _, w := range s.windows {
		kinds[w.fault.Kind()]++
	}
	p("Faults by kind: %s", counts(kinds))
	p("")
	p("| # | at | fault | hold | evicted (from the injection) | every node serving, the store theirs, after the heal | every ring agreeing after that | image calls invoked in the window | slowest |")
	p("| ---: | ---: | --- | ---: | --- | ---: | ---: | --- | ---: |")
	t0 := time.Time{}
	if len(s.windows) > 0 {
		t0 = s.windows[0].start.Add(-s.windows[0].fault.gap)
	}
	var agreeMax time.Duration
	for i, w := range s.windows {
		note := ""
		if w.termExit != "" {
			note = " (SIGTERM exit: " + w.termExit + ")"
		}
		evicted := strings.Join(w.evictions, ", ")
		if evicted == "" {
			evicted = "-"
		}
		p("| %d | +%s | %s%s | %s | %s | %s | %s | %s | %s |", i+1, w.start.Sub(t0).Round(100*time.Millisecond), w.fault, note,
			w.fault.hold.Round(100*time.Millisecond), evicted, w.ready.Sub(w.healed).Round(time.Millisecond),
			w.recovered.Sub(w.ready).Round(time.Millisecond), counts(w.calls), w.slowest.Round(time.Millisecond))
		agreeMax = max(agreeMax, w.recovered.Sub(w.ready))
	}
	p("")
	var fast, slowKills []time.Duration
	for _, w := range s.windows {
		for _, k := range w.killEvictions {
			if k.rule == ruleSession {
				fast = append(fast, k.after)
			} else {
				slowKills = append(slowKills, k.after)
			}
		}
	}
	line := fmt.Sprintf("SIGKILLed nodes evicted: %d; by their free session lock %d", len(fast)+len(slowKills), len(fast))
	if len(fast) > 0 {
		lo, med, hi := spread(fast)
		line += fmt.Sprintf(" (after the kill: min %s, median %s, max %s)", lo.Round(10*time.Millisecond), med.Round(10*time.Millisecond), hi.Round(10*time.Millisecond))
	}
	line += fmt.Sprintf("; by the beat or bus rule %d", len(slowKills))
	if len(slowKills) > 0 {
		line += " (a kill with another fault at once, or before the peers saw the lock held)"
	}
	p("%s.", line)
	p("")
	var armed, triggered, heldInPause, slow int
	for _, w := range s.windows {
		for _, part := range w.fault.parts {
			if part.kind == kindDBSlow {
				slow++
			}
		}
		st := w.stall
		if st == nil {
			continue
		}
		armed++
		if !st.triggered {
			p("Stall: %s armed for %s as the owner of vm %d; no VM operation reached its final write within %s, so it was paused unstalled.",
				st.node, st.length.Round(time.Millisecond), st.vm, chaosStallTrigger)
			continue
		}
		triggered++
		held := "it ended before the pause: NOT held in the pause"
		if st.heldInPause() {
			heldInPause++
			held = fmt.Sprintf("it ended %s after the resume: held in the pause", st.over.Sub(st.resumed).Round(time.Millisecond))
		} else if st.over.IsZero() {
			held = "its end was not logged"
		}
		p("Stall: %s armed for %s as the owner of vm %d; it held an operation on vm %s %s after the arming, was paused %s later for %s; %s.",
			st.node, st.length.Round(time.Millisecond), st.vm, shortID(st.held), st.holding.Sub(st.armed).Round(time.Millisecond),
			st.paused.Sub(st.holding).Round(time.Millisecond), st.resumed.Sub(st.paused).Round(time.Millisecond), held)
	}
	p("")
	f := s.fig
	p("Image calls: %d; by outcome: %s", f.calls, counts(f.byOutcome))
	p("By class: %s; longest call %s", counts(f.byClass), f.longestCall.Round(time.Millisecond))
	p("")
	p("VM calls: %d; by outcome: %s", s.vm.calls, counts(s.vm.byOutcome))
	p("")
	p("| figure | value |")
	p("| --- | --- |")
	for _, c := range s.checks {
		p("| image %d: porcupine | %s (%d operations, %d segments, %s); %d acknowledged writes |", c.index, c.result, c.ops, c.segments,
			c.took.Round(time.Millisecond), f.ackWrites[c.index])
	}
	for _, c := range s.vmChecks {
		p("| vm %d: porcupine (chaoscheck.VM, with the repairs) | %s (%d operations, %d segments, %s); %d acknowledged starts and stops |", c.index, c.result,
			c.ops, c.segments, c.took.Round(time.Millisecond), s.vm.ackWrites[c.index])
	}
	p("| silent calls (no reply or typed error by the deadline + %s) | %d |", fdBound, len(f.silent))
	p("| calls failed as bad request, not found or bad reply | %d |", len(f.never))
	p("| calls whose error names the database or quotes its driver | %d |", len(f.namesDB))
	noClockSends := 0
	if s.oneWay != nil {
		noClockSends = s.oneWay.noClock
	}
	p("| calls / one-way sends made while the client had no cluster time (their deadline counted from arrival) | %d / %d |", f.noClock, noClockSends)
	p("| success outside the fault windows | %d of %d (%.1f%%; at least %.0f%%) |", f.outsideOK, f.outside, 100*f.outsideShare(), 100*chaosMinOKShare)
	v := s.vm
	p("| VM calls: silent | %d |", len(v.silent))
	p("| VM calls: starts and stops refused from the VM's state (conflict; expected) | %d |", v.refused)
	p("| VM calls failed as bad request otherwise, not found or bad reply | %d |", len(v.never))
	p("| VM calls outside the fault windows answered (a reply or a refusal) | %d of %d (%.1f%%; at least %.0f%%) |", v.outsideAnswered, v.outside,
		100*v.outsideShare(), 100*chaosMinOKShare)
	p("| db-slow windows | %d |", slow)
	p("| stalls armed / holding an operation (\"test stall: holding\") / paused while holding it | %d / %d / %d |", armed, triggered, heldInPause)
	pending := strconv.Itoa(s.journalPending)
	if s.journalPending < 0 {
		pending = "unknown"
	}
	vl := s.vmLogs
	p("| VM journal entries taken (a final write failed after the hypervisor acted) / dropped as stale / held at the end | %d / %d / %s |",
		vl.journaled, vl.dropped, pending)
	sources := map[string]int{}
	for _, r := range vl.repairs {
		sources[r.Source]++
	}
	p("| VM repairs, by source | %d (%s) |", len(vl.repairs), counts(sources))
	p("| VM repairs that overwrote an acknowledged write | %d |", len(s.overwrites))
	if ow := s.oneWay; ow != nil {
		settled := s.oneWaySettled.Round(time.Millisecond).String() + " after the clients stopped"
		if s.oneWayErr != nil {
			settled = "NOT within " + chaosOneWaySettle.String() + " of the drain"
		}
		p("| one-way writes: taken by the broker / committed once / dead-lettered / refused at send | %d / %d / %d / %d |", ow.sent, ow.committed, ow.dead, ow.refusedAtSend)
		p("| one-way writes: confirmed but never run (neither committed nor dead-lettered) | %d |", len(ow.lost))
		p("| one-way writes: applied twice | %d |", len(ow.twice))
		p("| one-way writes: committed after their deadline + %s (+ a slowed link's one-way delay) | %d |", fdBound, len(ow.late))
		p("| one-way writes: names no send wrote | %d |", len(ow.foreign))
		p("| one-way writes: dead letters by reason | %s |", counts(ow.reasons))
		p("| one-way writes: committed and dead-lettered too / refused at send yet committed (allowed) | %d / %d |", ow.deadCommitted, ow.refusedCommitted)
		p("| one-way writes: every one accounted for | %s |", settled)
	}
	p("| every node back in every ring after the last heal | %s |", s.backInRings.Round(time.Millisecond))
	p("| every ring agreeing after every node served again and the store held their records, longest of every fault (one reconcile: %s) | %s |", chaosReconcileBound, agreeMax.Round(time.Millisecond))
	drained := s.drainedIn.Round(time.Millisecond).String() + " after the clients stopped"
	if s.drainErr != nil {
		drained = "NOT within " + chaosDrainBound.String() + ": " + s.drainErr.Error()
	}
	p("| every queue drained, none of a dead node left | %s |", drained)
	d := s.db
	p("| database: committed name changes (audit trigger) | %d |", d.commits)
	p("| database: acknowledged writes lost | %d |", len(d.lost))
	p("| database: applied twice | %d |", len(d.twice))
	p("| database: applied though refused | %d |", len(d.refusedApplied))
	p("| database: names no call wrote | %d |", len(d.foreign))
	p("| database: stale writes (token below an earlier commit's) | %d |", len(d.stale))
	p("| database: two-owner commits (one token, two claims) | %d |", len(d.twoOwners))
	p("| database: late executions (commit after the deadline + %s, + a slowed link's one-way delay) | %d (latest %s) |", fdBound, len(d.late), d.lateMax.Round(time.Millisecond))
	p("| database: broken chains of names | %d |", len(d.chainBreaks))
	p("| database: a client's writes out of issue order | %d |", len(d.reordered))
	p("| database: commits after the writer lost its lease (allowed) | %d |", d.afterLease)
	p("| database: calls of unknown outcome applied / not applied | %d / %d |", d.unknownApplied, d.unknownNot)
	p("| writes the fence refused to a node that had lost the resource (node logs) | %d |", s.fenced)
	p("| op logs: handler runs of one image on two nodes at once (reported, not asserted) | %d pairs, %d of them with both past the node's guard |", s.overlaps.pairs, s.overlaps.both)
	p("| op logs: runs started after the deadline + %s | %d |", fdBound, len(s.lateStarts))
	p("| op logs: messages refused as late | %d |", s.refusedLate)
	for _, l := range s.overlaps.first {
		p("")
		p("Overlap: %s", l)
	}
	p("")
	p("Nodes, at the start and the end (after the clients stopped and the queues drained; bound: the slot's start + %d goroutines, + %d MiB RSS):",
		chaosGoroutineSlack, chaosRSSSlack>>20)
	p("")
	p("| slot | start: process, goroutines, RSS | end: process, goroutines, RSS |")
	p("| --- | --- | --- |")
	for i := range max(len(s.start), len(s.end)) {
		cell := func(rs []nodeResources) string {
			if i >= len(rs) {
				return "-"
			}
			r := rs[i]
			if r.err != nil {
				return r.label + ": " + r.err.Error()
			}
			return fmt.Sprintf("%s, %d, %.1f MiB", r.label, r.goroutines, mib(r.rss))
		}
		p("| %c | %s | %s |", 'A'+i, cell(s.start), cell(s.end))
	}
	return b.String()
}

// counts is "a 3, b 1", sorted by key.
func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// dialJanitor is newJanitor outside a test: the caller closes j.conn.
func dialJanitor(broker string) (*janitor, error) {
	conn, err := dialBroker(broker, "refnode chaos test")
	if err != nil {
		return nil, fmt.Errorf("janitor: %w", err)
	}
	return &janitor{conn: conn}, nil
}
