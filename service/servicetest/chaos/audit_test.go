package chaos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// TestAudit: each anomaly is counted in its own figure, from commits
// recorded as a service would, with and without their time.
func TestAudit(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	rec := chaos.NewRecorder(func() time.Time { return c.now })
	write := func(v string) chaos.RegisterOp { return chaos.RegisterOp{Kind: chaos.Write, Value: v} }
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	dl := at(1000) // every call's deadline

	ok := rec.Invoke(0, "k", write("ok")) // committed once, acknowledged: fine
	rec.Commit(rec.ID(ok), "n1", at(5))
	c.now = at(10)
	rec.End(ok, chaos.RegisterOutput{}, nil, dl)

	lost := rec.Invoke(1, "k", write("lost")) // acknowledged, never committed
	rec.End(lost, chaos.RegisterOutput{}, nil, dl)

	read := rec.Invoke(1, "k", chaos.RegisterOp{Kind: chaos.Read}) // a read commits nothing: not lost
	rec.End(read, chaos.RegisterOutput{}, nil, dl)

	twice := rec.Invoke(2, "k", write("twice"))
	rec.Commit(rec.ID(twice), "n1", at(11))
	rec.Commit(rec.ID(twice), "", time.Time{}) // from an end-state read
	c.now = at(12)
	rec.End(twice, chaos.RegisterOutput{}, nil, dl)

	refused := rec.Invoke(3, "k", write("refused")) // said nothing ran, ran
	rec.End(refused, nil, message.ErrNotOwner, dl)
	rec.Commit(rec.ID(refused), "n1", at(13))

	rec.Commit(message.NewUUID(), "n1", at(14)) // a retry under a new id

	// An unknown write that commits after its deadline, over the
	// commit of a write invoked after that deadline: late and stale.
	c.now = at(20)
	old := rec.Invoke(4, "k2", write("old"))
	c.now = at(1000)
	rec.End(old, nil, message.ErrTimeout, at(1000))
	c.now = at(1500)
	later := rec.Invoke(5, "k2", write("later"))
	rec.Commit(rec.ID(later), "n1", at(1501))
	c.now = at(1502)
	rec.End(later, chaos.RegisterOutput{}, nil, at(2500))
	rec.Commit(rec.ID(old), "n2", at(1600)) // a node that held it past the deadline

	// An unknown write committed before its deadline, after a later
	// call ended early: neither late nor stale.
	c.now = at(3000)
	early := rec.Invoke(6, "k3", write("early"))
	c.now = at(3010)
	rec.End(early, nil, message.ErrInternal, at(4000)) // ended before its deadline, outcome unknown
	c.now = at(3020)
	next := rec.Invoke(7, "k3", write("next"))
	rec.Commit(rec.ID(next), "n1", at(3021))
	c.now = at(3022)
	rec.End(next, chaos.RegisterOutput{}, nil, at(4000))
	// "early" ended unknown, so it may take effect up to its deadline:
	// "next", invoked before that deadline, may commit first.
	rec.Commit(rec.ID(early), "n1", at(3500))

	wrote := func(in, _ any) bool { return in.(chaos.RegisterOp).Kind != chaos.Read }
	a := rec.Audit(0, wrote)
	assert.Equal(t, 9, a.Commits)
	assert.Equal(t, 7, a.Timed, "the end-state commit and the phantom are not timed")
	assert.Equal(t, 1, a.Lost, "lost")
	assert.Equal(t, 1, a.Twice, "twice")
	assert.Equal(t, 1, a.Refused, "refused")
	assert.Equal(t, 1, a.Phantom, "phantom")
	assert.Equal(t, 1, a.Late, "late")
	assert.Equal(t, 1, a.Stale, "stale")
	assert.Equal(t, 0, a.Overdue)
	assert.False(t, a.OK())
	assert.Len(t, a.First, 5, "the first five anomalies")
	assert.Contains(t, a.First[1], "committed by node n2 600ms after its caller's deadline", "the late commit, with its node")
	s := a.String()
	assert.Contains(t, s, "1 acknowledged writes lost, 1 committed twice, 1 committed though refused, 1 under no operation's id; of 7 timed, 1 late, 1 stale; 0 calls overdue")
	assert.Equal(t, 6, strings.Count(s, "\n")+1, "a line, then one per anomaly shown")

	// A grace past the deadline forgives the late commit; the stale one
	// stays.
	a = rec.Audit(time.Second, wrote)
	assert.Equal(t, 0, a.Late)
	assert.Equal(t, 1, a.Stale)

	// nil wrote: every acknowledged operation must have committed, the
	// read too.
	assert.Equal(t, 2, rec.Audit(0, nil).Lost)
}

// TestAuditEmpty: no operation and no commit is a clean audit.
func TestAuditEmpty(t *testing.T) {
	a := chaos.NewRecorder(nil).Audit(0, nil)
	assert.True(t, a.OK())
	assert.Equal(t, 0, a.Commits)
}
