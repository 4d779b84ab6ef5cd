package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// failoverReport formats the figures: a table of the SIGKILL rounds,
// min / median / max of their takeovers, the SIGTERM round, and whether
// the targets were met.
func failoverReport(db string, kills []killFigures, term termFigures, took time.Duration) string {
	def := heartbeat.DefaultConfig()
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	var b strings.Builder
	fmt.Fprintf(&b, "Failover of 3 refnode serve processes on RabbitMQ + %s, default heartbeat (beat %s, fence %s, evict %s, session locks on).\n",
		db, def.Interval, def.Lease, def.EvictAfter)
	fmt.Fprintf(&b, "Load: %d VMs, each called through api.portal every %s (GetVm; StartVm/StopVm on every %dth), %s timeout,\n",
		foVMs, loadPace, operatedEvery, loadCallTimeout)
	fmt.Fprintf(&b, "at most %d calls in flight; again after %s after a failure, and while a VM of the stopped node has not\n", loadInFlight, loadRetry)
	fmt.Fprintf(&b, "answered from another node. Times are from the signal: beat = age of the victim's last heartbeat at the kill;\n")
	fmt.Fprintf(&b, "evicted = the first survivor's ring dropped it; rings = every survivor's had; half, takeover = half, every VM\n")
	fmt.Fprintf(&b, "it owned answered from a survivor. Calls: failed/made after the kill (until all VMs answered again) | before it.\n\n")
	fmt.Fprintf(&b, "%-4s %-6s %4s %6s %8s %8s %8s %9s  %s\n", "kill", "victim", "VMs", "beat", "evicted", "rings", "half", "takeover", "calls after | before")
	var takeovers, evictions []time.Duration
	for _, k := range kills {
		takeovers, evictions = append(takeovers, k.takeover), append(evictions, k.evicted)
		fmt.Fprintf(&b, "%-4d %-6s %4d %6s %8s %8s %8s %9s  %s | %s\n",
			k.round, k.victim, k.vms, ms(k.lastBeat), ms(k.evicted), ms(k.rings), ms(k.half), ms(k.takeover), k.calls, k.between)
	}
	lo, med, hi := spread(takeovers)
	elo, emed, ehi := spread(evictions)
	fmt.Fprintf(&b, "\nSIGKILL takeover: min %s, median %s, max %s (eviction: min %s, median %s, max %s)\n",
		ms(lo), ms(med), ms(hi), ms(elo), ms(emed), ms(ehi))
	fmt.Fprintf(&b, "  targets median <= %s: %s, max <= %s: %s; bounds in the test: median < %s, each < %s\n",
		foKillTarget, met(med <= foKillTarget), foKillMaxGoal, met(hi <= foKillMaxGoal), foMedianBound, foKillBound)
	fmt.Fprintf(&b, "SIGTERM of node %s (%d VMs): rings %s, half %s, takeover %s, process exited %s; calls %s | %s\n",
		term.leaver, term.vms, ms(term.rings), ms(term.half), ms(term.takeover), ms(term.exited), term.calls, term.between)
	fmt.Fprintf(&b, "  target takeover <= %s: %s; bound in the test: < %s\n", foTermTarget, met(term.takeover <= foTermTarget), foTermBound)
	examples := map[string]string{} // one error text per code, over every window
	for _, w := range append(windows(kills), term.calls, term.between) {
		for code, text := range w.example {
			examples[code] = text
		}
	}
	for _, code := range slices.Sorted(maps.Keys(examples)) {
		fmt.Fprintf(&b, "e.g. %s: %s\n", code, tail(examples[code], 240))
	}
	fmt.Fprintf(&b, "Whole test: %s.\n", ms(took))
	return b.String()
}

// windows returns the call counts of every kill round, before and after.
func windows(kills []killFigures) []window {
	var ws []window
	for _, k := range kills {
		ws = append(ws, k.between, k.calls)
	}
	return ws
}

// spread returns the minimum, the median and the maximum of ds.
func spread(ds []time.Duration) (lo, med, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(ds))
	med = s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[0], med, s[len(s)-1]
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
