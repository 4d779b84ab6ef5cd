package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/chaoscheck"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// The chaos test's VMs: clients that start, stop and read VMs, their
// records, the repairs the nodes logged, and what those tell: each VM's
// history checked against refnode's state machine (chaoscheck.VM), and
// the repairs that overwrote an acknowledged write.

// The kinds of a VM call.
const (
	vmGet   = "get"   // GetVm
	vmStart = "start" // StartVm
	vmStop  = "stop"  // StopVm
)

// chaosVMOp is one call of a VM client, as its process recorded it.
// Times are Unix nanoseconds of the wall clock.
type chaosVMOp struct {
	VM       int    `json:"vm"`     // the VM's index
	Client   int    `json:"client"` // the client's index among the VM's clients
	Seq      int    `json:"seq"`
	Kind     string `json:"kind"` // get, start, stop
	Invoke   int64  `json:"invoke"`
	Done     int64  `json:"done"`
	Deadline int64  `json:"deadline"`
	Outcome  string `json:"outcome"` // ok, the error's code (outcomeOf)
	Class    string `json:"class"`
	// Refused is set for a start or stop refused as not allowed from the
	// VM's state (conflict, "cannot stop a VM that is created"): it
	// did not happen, and says what the state was not.
	Refused bool   `json:"refused,omitempty"`
	State   string `json:"state,omitempty"`   // the reply's VM state
	Version int64  `json:"version,omitempty"` // the reply's record version
	Node    string `json:"node,omitempty"`
	OpID    string `json:"op"`
	MsgID   string `json:"msg"`
	Err     string `json:"err,omitempty"`
}

func (o chaosVMOp) invoked() time.Time  { return time.Unix(0, o.Invoke) }
func (o chaosVMOp) done() time.Time     { return time.Unix(0, o.Done) }
func (o chaosVMOp) deadline() time.Time { return time.Unix(0, o.Deadline) }

// writes reports whether the call may change the VM: a start or a stop.
func (o chaosVMOp) writes() bool { return o.Kind != vmGet }

// failed reports whether the call is known not to have taken effect and
// tells nothing of the VM's state: refused before it ran (a refusal from
// the VM's state tells that state; see Refused).
func (o chaosVMOp) failed() bool {
	return o.Class == classSafe || o.Class == classNever && !o.Refused
}

// String describes the call for a report.
func (o chaosVMOp) String() string {
	res := o.Outcome
	switch {
	case o.Refused:
		res = "refused"
	case o.Class == classOK:
		res = fmt.Sprintf("%s@%d", o.State, o.Version)
	}
	s := fmt.Sprintf("vm %d client %d #%d %s() -> %s, %s-%s (deadline %s)", o.VM, o.Client, o.Seq, o.Kind, res,
		o.invoked().Format(clockFormat), o.done().Format(clockFormat), o.deadline().Format(clockFormat))
	if o.Node != "" {
		s += " on " + shortID(o.Node)
	}
	if o.Err != "" && !o.Refused {
		s += " [" + tail(o.Err, 160) + "]"
	}
	return s + " op " + o.OpID
}

// refusedTransition reports whether err refuses a start or stop (kind)
// as not allowed from the VM's state: conflict, naming the states
// the operation is allowed from (cloud.Transition).
func refusedTransition(kind string, err error) bool {
	return kind != vmGet && message.CodeOf(err) == message.ErrConflict.Code &&
		strings.Contains(err.Error(), "cannot "+kind+" a VM that is")
}

// runChaosVMClient calls VM k until stop ends, with the discipline of
// runChaosClient: after a start or stop of unknown outcome it waits
// until that call's deadline plus fdBound, so it has one operation at a
// time on its VM. It reads 4 times in 10; otherwise it mostly asks for
// the operation that changes the state it last saw (a start of a
// stopped VM, a stop of a running one), sometimes for the other, which
// succeeds leaving the state as it was, or, a stop of a VM never
// started, is refused.
func runChaosVMClient(stop context.Context, cl *service.Client, cfg chaosClientConfig, k int, vm string, w *recordWriter) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(1000*cfg.Client+500+k)))
	last := cloud.VMCreated // "" after an unknown outcome
	var opts []bus.Option
	if cfg.Retry {
		opts = append(opts, bus.WithRetry(2))
	}
	for seq := 0; ; seq++ {
		select {
		case <-stop.Done():
			return
		case <-time.After(time.Duration(rng.Int64N(int64(cfg.MaxPause) + 1))):
		}
		o := chaosVMOp{VM: k, Client: cfg.Client, Seq: seq, Kind: vmGet,
			OpID: fmt.Sprintf("chaos-%s-v%d-c%d-%d", cfg.Run, k, cfg.Client, seq), MsgID: message.NewUUID()}
		allowed := vmStart
		switch {
		case last == cloud.VMRunning:
			allowed = vmStop
		case last == "" && rng.IntN(2) == 0:
			allowed = vmStop
		}
		other := map[string]string{vmStart: vmStop, vmStop: vmStart}[allowed]
		switch p := rng.IntN(10); {
		case p < 4:
		case p < 9:
			o.Kind = allowed
		default:
			o.Kind = other
		}
		callOpts := append(opts[:len(opts):len(opts)], bus.WithTimeout(cfg.Timeout), bus.WithHeader(HeaderOp, o.OpID), bus.WithID(o.MsgID))
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		deadline, _ := ctx.Deadline()
		o.Invoke, o.Deadline = time.Now().UnixNano(), deadline.UnixNano()
		var msg any = api.GetVm{UUID: vm}
		switch o.Kind {
		case vmStart:
			msg = api.StartVm{UUID: vm}
		case vmStop:
			msg = api.StopVm{UUID: vm}
		}
		rep, err := service.Call[api.VmReply](ctx, cl, msg, callOpts...)
		o.Done = time.Now().UnixNano()
		cancel()
		o.Outcome, o.Class, o.Refused = outcomeOf(err), classOf(err), refusedTransition(o.Kind, err)
		if err == nil {
			o.State, o.Version, o.Node = string(rep.VM.State), rep.VM.Version, rep.Node
		} else {
			o.Err = err.Error()
		}
		w.write(o)
		switch {
		case o.Class == classOK:
			last = rep.VM.State
		case o.Refused && o.Kind == vmStop:
			last = cloud.VMCreated // the only state a stop is refused from, destroyed aside
		case o.Refused:
			last = cloud.VMDestroyed // the only state a start is refused from
		case o.failed(), !o.writes():
		default:
			last = ""
			select { // one operation at a time: this call may take effect until its deadline
			case <-stop.Done():
				return
			case <-time.After(time.Until(deadline.Add(fdBound))):
			}
		}
	}
}

// vmRepair is a repair a node logged: "vm state repaired from the
// hypervisor", with its attributes.
type vmRepair struct {
	VM            string // UUID
	Node          string // the label of the process that logged it
	At            time.Time
	From, To      cloud.VMState
	Source        string // journal or power
	Base, Version int64  // the record's version the repair read, and the one it wrote
}

// String describes the repair for a report.
func (r vmRepair) String() string {
	return fmt.Sprintf("repair of vm %s on %s at %s: %s@%d -> %s@%d from the %s", shortID(r.VM), r.Node, r.At.Format(clockFormat),
		r.From, r.Base, r.To, r.Version, r.Source)
}

// logAttr returns the value of attribute key in a slog text line
// (key=value, or key="quoted value"), or "".
func logAttr(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if q, err := strconv.QuotedPrefix(v); err == nil {
			u, _ := strconv.Unquote(q)
			return u
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// parseRepair reads a repair's line; false if the line is not one.
func parseRepair(l logLine, node string) (vmRepair, bool) {
	if !strings.Contains(l.Text, "vm state repaired from the hypervisor") {
		return vmRepair{}, false
	}
	base, err1 := strconv.ParseInt(logAttr(l.Text, "base"), 10, 64)
	version, err2 := strconv.ParseInt(logAttr(l.Text, "version"), 10, 64)
	r := vmRepair{VM: logAttr(l.Text, "vm"), Node: node, At: l.At, From: cloud.VMState(logAttr(l.Text, "from")),
		To: cloud.VMState(logAttr(l.Text, "to")), Source: logAttr(l.Text, "source"), Base: base, Version: version}
	return r, err1 == nil && err2 == nil && r.VM != ""
}

// chaosRepairSpan is how long before its log line a repair may have
// committed: the line follows the commit, and the repair's transaction
// (a read, the hypervisor's power, a write) lasts less than this even
// on a slowed database link.
const chaosRepairSpan = 5 * time.Second

// vmHistory replays one VM's calls into a recorder and returns the
// history, each operation's Metadata its call (or repair). A call that
// failed before it ran is left out; a refused one returns Refused; one
// of unknown outcome may take effect until its deadline + fdBound.
//
// A repair is in the history too, as the operation whose outcome it
// records (a start to running, a stop to stopped), returning its state
// when it was logged and invoked chaosRepairSpan before: a call whose
// hypervisor acted while its final write failed takes effect in the
// record when a repair writes it, which may be after the call's
// deadline. (The repairs that overwrote an acknowledged write are
// counted apart: vmOverwrites.)
func vmHistory(ops []chaosVMOp, repairs []vmRepair) []porcupine.Operation {
	calls := make([]histCall, 0, len(ops)+len(repairs))
	for _, o := range ops {
		c := histCall{client: o.Client, invoke: o.Invoke, done: o.Done, meta: o,
			in: chaoscheck.VMInput{Op: map[string]cloud.VMOp{vmGet: "", vmStart: cloud.VMOpStart, vmStop: cloud.VMOpStop}[o.Kind]}}
		switch {
		case o.Class == classOK:
			c.out = chaoscheck.VMOutput{State: cloud.VMState(o.State)}
		case o.Refused:
			c.out = chaoscheck.VMOutput{Refused: true}
		case o.failed():
			c.fail = true
		default:
			c.until = o.deadline().Add(fdBound)
		}
		calls = append(calls, c)
	}
	for _, r := range repairs {
		op := map[cloud.VMState]cloud.VMOp{cloud.VMRunning: cloud.VMOpStart, cloud.VMStopped: cloud.VMOpStop}[r.To]
		if op == "" {
			continue // no repair of this test goes elsewhere; a history with it would fail as it should
		}
		calls = append(calls, histCall{client: chaosClients + 1, invoke: r.At.Add(-chaosRepairSpan).UnixNano(), done: r.At.UnixNano(), meta: r,
			in: chaoscheck.VMInput{Op: op}, out: chaoscheck.VMOutput{State: r.To}})
	}
	return replayHistory(calls)
}

// vmOverwrites lists the repairs that overwrote an acknowledged write:
// a repair that read the record at version base, while a start or stop
// acknowledged with a version above base (or a read showing a version
// above the repair's own) had completed before the repair was logged.
// ops are the calls of every VM; vms maps a VM's UUID to its index.
func vmOverwrites(repairs []vmRepair, ops []chaosVMOp, vms map[string]int) []string {
	var out []string
	for _, r := range repairs {
		k, ok := vms[r.VM]
		if !ok {
			continue
		}
		for _, o := range ops {
			if o.VM != k || o.Class != classOK || !o.done().Before(r.At) {
				continue
			}
			if o.writes() && o.Version > r.Base || !o.writes() && o.Version > r.Version {
				out = append(out, fmt.Sprintf("%s, after %s", r, o))
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// vmFigures are the VM calls' figures.
type vmFigures struct {
	calls           int
	byOutcome       map[string]int // "start ok", "stop refused", "get timeout", …
	refused         int            // starts and stops refused from the VM's state: expected
	silent, never   []string       // never: a never or ran class other than those refusals
	ackWrites       map[int]int    // VM -> starts and stops acknowledged
	outside         int            // calls invoked outside every fault window
	outsideAnswered int            // … answered: a reply, or a refusal from the VM's state
}

// outsideShare is the share of the calls outside every window that were
// answered.
func (f vmFigures) outsideShare() float64 {
	if f.outside == 0 {
		return 0
	}
	return float64(f.outsideAnswered) / float64(f.outside)
}

// tallyVMCalls counts the VM calls.
func tallyVMCalls(ops []chaosVMOp, windows []chaosWindow) vmFigures {
	f := vmFigures{byOutcome: map[string]int{}, ackWrites: map[int]int{}}
	for _, o := range ops {
		f.calls++
		what := o.Kind + " " + o.Outcome
		if o.Refused {
			what = o.Kind + " refused"
			f.refused++
		}
		f.byOutcome[what]++
		if o.Class == classUntyped || o.done().After(o.deadline().Add(fdBound)) {
			f.silent = append(f.silent, o.String())
		}
		if (o.Class == classNever || o.Class == classRan) && !o.Refused {
			f.never = append(f.never, o.String())
		}
		if o.Class == classOK && o.writes() {
			f.ackWrites[o.VM]++
		}
		if !slices.ContainsFunc(windows, func(w chaosWindow) bool { return w.contains(o.invoked()) }) {
			f.outside++
			if o.Class == classOK || o.Refused {
				f.outsideAnswered++
			}
		}
	}
	return f
}

// vmLogs is what the nodes logged about their VMs' records.
type vmLogs struct {
	repairs   []vmRepair // in log time order
	journaled int        // final writes failed after the hypervisor acted: journal entries taken
	dropped   int        // journal entries dropped as stale: the record changed since
}

// readVMLogs reads the repairs and the journal entries taken and dropped
// from the log of every process the cluster ran.
func readVMLogs(fc *faultCluster) vmLogs {
	var v vmLogs
	for _, n := range fc.Nodes() {
		for _, c := range n.runs {
			for _, l := range c.logLines("vm state repaired from the hypervisor") {
				if r, ok := parseRepair(l, c.label); ok {
					v.repairs = append(v.repairs, r)
				}
			}
			v.journaled += len(c.logLines("the hypervisor acted but the record did not follow"))
			v.dropped += len(c.logLines("vm journal entry dropped: the record changed since it was taken"))
		}
	}
	slices.SortFunc(v.repairs, func(a, b vmRepair) int { return a.At.Compare(b.At) })
	return v
}

// journalPending is the number of journal entries the running nodes
// still hold (/status vms.journaled), or -1 if a node did not answer.
func journalPending(fc *faultCluster) int {
	n := 0
	for _, c := range fc.Running() {
		st, err := c.status()
		if err != nil {
			return -1
		}
		n += st.VMs.Journaled
	}
	return n
}

// TestChaosHistoryVM checks the VM side on made-up calls: refusals and
// unknown outcomes in a linearizable history, a record that changes
// after an unknown call's window (illegal, unless a repair logged it
// then), the repairs read from log lines, the overwrites they count, and
// the tally that exempts refusals from the rule on never-class errors.
func TestChaosHistoryVM(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	seq := 0
	call := func(client int, kind string, from, to int, class string, state string, version int64) chaosVMOp {
		seq++
		o := chaosVMOp{Client: client, Seq: seq, Kind: kind, Invoke: at(from).UnixNano(), Done: at(to).UnixNano(),
			Deadline: at(from + 5000).UnixNano(), Outcome: class, Class: class, State: state, Version: version, OpID: fmt.Sprint("op-", seq)}
		if class == "refused" {
			o.Outcome, o.Class, o.Refused = string(message.ErrConflict.Code), classNever, true
		}
		return o
	}
	ok := []chaosVMOp{
		call(0, vmStart, 0, 10, classOK, "running", 2),
		call(1, vmStop, 5, 15, "refused", "", 0), // concurrent with the start, before it
		call(2, vmGet, 20, 25, classOK, "running", 2),
		call(0, vmStop, 30, 40, classUnknown, "", 0),
		call(1, vmGet, 50, 55, classOK, "running", 2), // the stop not yet
		call(2, vmGet, 100, 110, classOK, "stopped", 3),
		call(0, vmGet, 120, 130, classSafe, "", 0), // refused before it ran: left out
		call(3, vmStop, 1, 4, "refused", "", 0),    // before the start too: a stop is refused only from created
	}
	hist := vmHistory(ok, nil)
	assert.Len(t, hist, len(ok)-1, "the call refused before it ran is left out")
	c := checkHistory("vm", 0, hist, cloud.VMCreated, vmModel, 1000, time.Minute, "")
	assert.Equal(t, porcupine.Ok, c.result, c.evidence)
	assert.Equal(t, porcupine.Ok, checkHistory("vm", 0, hist, cloud.VMCreated, vmModel, 2, time.Minute, "").result, "cut at isolated reads")
	segs := splitHistory(hist, cloud.VMCreated, 2)
	require.Greater(t, len(segs), 1)
	assert.Equal(t, cloud.VMRunning, segs[1].init)
	bad := append(slices.Clone(ok), call(2, vmGet, 200, 210, classOK, "running", 2))
	c = checkHistory("vm", 0, vmHistory(bad, nil), cloud.VMCreated, vmModel, 1000, time.Minute, "")
	assert.Equal(t, porcupine.Illegal, c.result, "running again with no start")
	assert.Contains(t, c.evidence, "get() -> running@2")

	// A stop whose final write failed, recorded by a repair after its
	// window: illegal without the repair, linearizable with it.
	late := []chaosVMOp{
		call(0, vmStart, 0, 10, classOK, "running", 2),
		call(0, vmStop, 30, 40, classUnknown, "", 0),
		call(1, vmGet, 5300, 5310, classOK, "running", 2),
		call(2, vmGet, 6100, 6110, classOK, "stopped", 3),
	}
	c = checkHistory("vm", 0, vmHistory(late, nil), cloud.VMCreated, vmModel, 1000, time.Minute, "")
	assert.Equal(t, porcupine.Illegal, c.result, "the record changed after the stop's deadline + fdBound, and no call did it")
	line := logLine{At: at(6000), Text: `time=2025-03-01T12:00:06.000Z level=WARN msg="vm state repaired from the hypervisor" service=vmInstance node=n1 ` +
		`vm=v1 from=running to=stopped power=unknown source=journal base=2 version=3`}
	r, parsed := parseRepair(line, "A1")
	require.True(t, parsed)
	assert.Equal(t, vmRepair{VM: "v1", Node: "A1", At: at(6000), From: cloud.VMRunning, To: cloud.VMStopped, Source: "journal", Base: 2, Version: 3}, r)
	_, parsed = parseRepair(logLine{At: at(0), Text: "time=x msg=other vm=v1"}, "A1")
	assert.False(t, parsed)
	assert.Equal(t, "a b", logAttr(`time=x msg="a b" k=v`, "msg"))
	assert.Equal(t, "v", logAttr(`time=x msg="a b" k=v`, "k"))
	assert.Empty(t, logAttr(`time=x k=v`, "missing"))
	c = checkHistory("vm", 0, vmHistory(late, []vmRepair{r}), cloud.VMCreated, vmModel, 1000, time.Minute, "")
	assert.Equal(t, porcupine.Ok, c.result, "the repair recorded the stop: %s", c.evidence)

	// Overwrites: a repair that read version 2 after a stop was
	// acknowledged at version 3; a read of the repair's own version is no
	// evidence.
	acked := call(1, vmStop, 5400, 5500, classOK, "stopped", 3)
	acked.VM = 0
	own := call(2, vmGet, 5990, 5995, classOK, "stopped", 3)
	over := vmOverwrites([]vmRepair{r}, []chaosVMOp{own}, map[string]int{"v1": 0})
	assert.Empty(t, over, "a read showing the repair's own version")
	over = vmOverwrites([]vmRepair{r}, []chaosVMOp{own, acked}, map[string]int{"v1": 0})
	require.Len(t, over, 1)
	assert.Contains(t, over[0], "repair of vm v1 on A1")
	afterwards := call(1, vmStart, 6100, 6200, classOK, "running", 4)
	assert.Empty(t, vmOverwrites([]vmRepair{r}, []chaosVMOp{afterwards}, map[string]int{"v1": 0}), "a write after the repair")

	fig := tallyVMCalls(append(slices.Clone(ok), call(0, vmGet, 300, 310, classNever, "", 0)), nil)
	assert.Equal(t, 2, fig.refused)
	assert.Len(t, fig.never, 1, "a never-class error other than a refusal from the VM's state")
	assert.Equal(t, 1, fig.ackWrites[0], "the start")
	assert.Equal(t, 9, fig.outside)
	assert.Equal(t, 6, fig.outsideAnswered, "4 replies, 2 refusals")

	assert.True(t, refusedTransition(vmStart, message.ErrConflict.WithDetails("cannot start a VM that is destroyed; start is allowed from created, stopped, running")))
	assert.False(t, refusedTransition(vmGet, message.ErrConflict.WithDetails("cannot start a VM that is destroyed")))
	assert.False(t, refusedTransition(vmStop, message.ErrBadRequest.WithDetails("invalid uuid")))
	assert.False(t, refusedTransition(vmStop, message.ErrNotFound))
}
