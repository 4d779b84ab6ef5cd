package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

// The chaos test's one-way writes: each client process sends one-way
// SetImageName messages, each with a name of its own, to images that no
// image client calls, through api.portal (service.Client.Send), with a
// deadline. The bus keeps a one-way message until it runs (package bus,
// "One-way messages"): every message the broker took must have its name
// committed exactly once (the audit trigger), or wait in the dead-letter
// queue with its reason.

// chaosSend is one one-way write, as its process recorded it. Times are
// Unix nanoseconds of the wall clock.
type chaosSend struct {
	Image    int    `json:"image"` // the index of the image among the one-way images
	Client   int    `json:"client"`
	Seq      int    `json:"seq"`
	Name     string `json:"name"` // unique in the test
	Sent     int64  `json:"sent"` // just before the Send
	Done     int64  `json:"done"` // when Send returned
	Deadline int64  `json:"deadline"`
	OpID     string `json:"op"`
	MsgID    string `json:"msg"`
	Err      string `json:"err,omitempty"` // Send's error: the broker did not take it
	// NoClock is set when the client had no cluster time at the send
	// (as chaosOp.NoClock).
	NoClock bool `json:"no_clock,omitempty"`
}

func (s chaosSend) deadline() time.Time { return time.Unix(0, s.Deadline) }

// String describes the send for a report.
func (s chaosSend) String() string {
	str := fmt.Sprintf("one-way image %d client %d #%d name %q msg %s sent %s (deadline %s)", s.Image, s.Client, s.Seq, s.Name, s.MsgID,
		time.Unix(0, s.Sent).Format(clockFormat), s.deadline().Format(clockFormat))
	if s.Err != "" {
		str += " [" + tail(s.Err, 160) + "]"
	}
	if s.NoClock {
		str += " (the client had no cluster time)"
	}
	return str
}

// runOneWaySender sends one-way writes to image k (img) until stop
// ends: a unique name every cfg.OneWayEvery[0] to [1], at random, each
// with the deadline cfg.OneWayTimeout and an x-op header.
func runOneWaySender(stop context.Context, cl *service.Client, cfg chaosClientConfig, k int, img string, w *recordWriter) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(1000*cfg.Client+900+k)))
	lo, hi := cfg.OneWayEvery[0], cfg.OneWayEvery[1]
	for seq := 0; ; seq++ {
		select {
		case <-stop.Done():
			return
		case <-time.After(lo + time.Duration(rng.Int64N(int64(hi-lo)+1))):
		}
		s := chaosSend{Image: k, Client: cfg.Client, Seq: seq, Name: fmt.Sprintf("ow%d.%d.%d", cfg.Client, k, seq),
			OpID: fmt.Sprintf("chaos-%s-w%d-c%d-%d", cfg.Run, k, cfg.Client, seq), MsgID: message.NewUUID()}
		ctx, cancel := context.WithTimeout(context.Background(), cfg.OneWayTimeout)
		deadline, _ := ctx.Deadline()
		_, _, clockOK := cl.ClusterTime()
		s.Sent, s.Deadline, s.NoClock = time.Now().UnixNano(), deadline.UnixNano(), !clockOK
		err := service.Send(ctx, cl, api.SetImageName{UUID: img, Name: s.Name},
			bus.WithID(s.MsgID), bus.WithTimeout(cfg.OneWayTimeout), bus.WithHeader(HeaderOp, s.OpID))
		s.Done = time.Now().UnixNano()
		cancel()
		if err != nil {
			s.Err = err.Error()
		}
		w.write(s)
	}
}

// oneWayFigures account for the one-way writes.
type oneWayFigures struct {
	sent, refusedAtSend int // Send returned nil; an error
	committed, dead     int // committed once; dead-lettered and not committed
	lost                []string
	twice               []string
	late                []string       // committed after the deadline + fdBound
	foreign             []string       // names on the one-way images no send wrote
	deadCommitted       int            // committed once and dead-lettered too (a retry after a commit whose reply was lost)
	refusedCommitted    int            // refused at send, committed all the same
	reasons             map[string]int // dead letters by reason
	noClock             int            // sends made while the client had no cluster time
}

// violations lists the counts that must be zero, by name.
func (f *oneWayFigures) violations() map[string][]string {
	return map[string][]string{
		"confirmed one-way messages never run (neither committed nor dead-lettered)": f.lost,
		"one-way messages applied twice":                                             f.twice, "one-way messages committed after their deadline + bound": f.late,
		"names on the one-way images no send wrote": f.foreign,
	}
}

// deadReason classes a dead letter's reason for the report.
func deadReason(reason string) string {
	switch {
	case strings.Contains(reason, "before it could start"):
		return "late before it could start"
	case strings.Contains(reason, "its deadline passes"):
		return "retries past its deadline"
	case strings.Contains(reason, "Config.RetryAttempts"):
		return "out of attempts"
	}
	return "other: " + tail(reason, 60)
}

// analyzeOneWay accounts for every send: rows are the audit rows of the
// one-way images (images maps their UUIDs to their indices), dead the
// dead-letter reason of a message id ("" if none), slack the delay of
// slowed database links (analyzeAudit).
func analyzeOneWay(sends []chaosSend, rows []auditRow, images map[string]int, dead func(id string) string, slack linkSlack) *oneWayFigures {
	f := &oneWayFigures{reasons: map[string]int{}}
	type key struct {
		image int
		name  string
	}
	commits := map[key][]auditRow{}
	written := map[key]bool{}
	for _, s := range sends {
		written[key{s.Image, s.Name}] = true
	}
	for _, r := range rows {
		k, ok := images[r.Image]
		if !ok {
			continue
		}
		kk := key{k, r.New}
		commits[kk] = append(commits[kk], r)
		if !written[kk] {
			f.foreign = append(f.foreign, r.String())
		}
	}
	for _, s := range sends {
		if s.NoClock {
			f.noClock++
		}
		cs := commits[key{s.Image, s.Name}]
		reason := dead(s.MsgID)
		if s.Err != "" {
			f.refusedAtSend++
			if len(cs) > 0 {
				f.refusedCommitted++
			}
			continue
		}
		f.sent++
		switch {
		case len(cs) > 1:
			var parts []string
			for _, r := range cs {
				parts = append(parts, r.String())
			}
			f.twice = append(f.twice, s.String()+": "+strings.Join(parts, "; "))
		case len(cs) == 1:
			f.committed++
			if reason != "" {
				f.deadCommitted++
			}
			if late := cs[0].at().Sub(s.deadline()); late > fdBound+slack.of(cs[0].Node, cs[0].at()) {
				f.late = append(f.late, fmt.Sprintf("%s: %s, %s after its deadline", s, cs[0], late.Round(time.Millisecond)))
			}
		case reason != "":
			f.dead++
			f.reasons[deadReason(reason)]++
		default:
			f.lost = append(f.lost, s.String())
		}
	}
	for _, l := range [][]string{f.lost, f.twice, f.late, f.foreign} {
		slices.Sort(l)
	}
	return f
}

// TestChaosAuditOneWay accounts for made-up one-way writes: committed
// once, twice, late, dead-lettered (with and without a commit), lost,
// refused at send; and a name no send wrote.
func TestChaosAuditOneWay(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	send := func(seq int, err string) chaosSend {
		return chaosSend{Image: 1, Client: 2, Seq: seq, Name: fmt.Sprintf("ow2.1.%d", seq), Sent: ms(0).UnixNano(), Done: ms(5).UnixNano(),
			Deadline: ms(10000).UnixNano(), MsgID: fmt.Sprintf("m%d", seq), Err: err}
	}
	sends := []chaosSend{send(0, ""), send(1, ""), send(2, ""), send(3, ""), send(4, "bus: send: not_sent"), send(5, ""), send(6, "")}
	row := func(seq int64, name string, at int) auditRow {
		return auditRow{Seq: seq, Image: "img", Old: "x", New: name, Token: 1, Node: "n1", Epoch: 1, AtUS: ms(at).UnixMicro()}
	}
	rows := []auditRow{
		row(1, "ow2.1.0", 100),
		row(2, "ow2.1.1", 200), row(3, "ow2.1.1", 300), // twice
		row(4, "ow2.1.5", 12000),                 // after the deadline
		row(5, "ow2.1.6", 400),                   // and dead-lettered too
		row(6, "ow2.1.4", 500),                   // refused at send, committed all the same
		row(7, "zzz", 600),                       // no send wrote it
		{Seq: 8, Image: "other", New: "ow2.1.3"}, // another image: not counted
	}
	dead := map[string]string{
		"m2": "its deadline passed 1.2s before it could start on node ab; it did not run",
		"m6": "it failed 3 times and its deadline passes in 10ms, before the next attempt (in 400ms); last error: internal",
	}
	f := analyzeOneWay(sends, rows, map[string]int{"img": 1}, func(id string) string { return dead[id] }, nil)
	assert.Equal(t, 6, f.sent)
	assert.Equal(t, 1, f.refusedAtSend)
	assert.Equal(t, 1, f.refusedCommitted)
	assert.Equal(t, 3, f.committed, "0, 5 and 6")
	assert.Equal(t, 1, f.dead, "2")
	assert.Equal(t, 1, f.deadCommitted, "6")
	assert.Equal(t, map[string]int{"late before it could start": 1}, f.reasons)
	require.Len(t, f.lost, 1)
	assert.Contains(t, f.lost[0], `name "ow2.1.3"`)
	require.Len(t, f.twice, 1)
	assert.Contains(t, f.twice[0], "ow2.1.1")
	require.Len(t, f.late, 1)
	assert.Contains(t, f.late[0], "2s after its deadline")
	require.Len(t, f.foreign, 1)
	assert.Contains(t, f.foreign[0], `"zzz"`)
	for name, list := range f.violations() {
		assert.NotEmpty(t, list, "the made-up writes break %q", name)
	}
	assert.Equal(t, "retries past its deadline", deadReason(dead["m6"]))
	assert.Equal(t, "out of attempts", deadReason("it failed 20 times (Config.RetryAttempts 20); last error: x"))
}
