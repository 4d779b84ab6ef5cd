package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The chaos test's database-side view: a PostgreSQL trigger, installed
// by the test on the cluster's image table, appends a row to an audit
// table for every committed update of an image (a constraint trigger
// deferred to the commit: a rolled-back update leaves no row), with the
// image's fence token row as the committing transaction sees it (its
// own: the fence's check is the transaction's first statement and holds
// that row until the commit) and the writer's heartbeat record at that
// moment. Updates of one image are serialized by that row lock, so the
// audit rows of an image are in commit order. Together with the
// clients' records (every written name is unique) they tell:
//
//   - acknowledged writes lost: a write or swapped cas that got a reply
//     and whose name was never committed;
//   - applied twice: a name committed more than once;
//   - applied though refused: a call that failed as not having happened
//     (not_owner, busy, …) whose name was committed;
//   - stale writes: a commit whose token is below an earlier commit's;
//   - two-owner commits: two commits under one token by different
//     (node, epoch) claims;
//   - late executions: a commit after its caller's deadline + fdBound
//     (the commit's time by the database's clock, which the deadlines
//     travel in; the test takes the clients' clock for it, as both run on
//     this machine), plus, while the writer's database link was slowed,
//     the link's one-way delay: a COMMIT sent by the deadline reaches the
//     database that much later (linkSlack);
//   - broken chains: a commit whose old name is not the name the
//     previous commit wrote, or a cas committed over a name other than
//     the one it expected;
//   - reorders: one client's names committed out of its issue order;
//   - commits after the writer lost its lease (its heartbeat record gone,
//     of another epoch, or older than -evict-after): allowed (the new
//     owner's check waits for the row), counted for the reader.

// chaosAudit is the audit trigger of one cluster's image table.
type chaosAudit struct {
	db                  *sql.DB
	table, fn, trig     string
	images, tokens, hbt string
}

// newChaosAudit names the audit objects of the cluster whose tables
// start with base.
func newChaosAudit(db *sql.DB, base string) *chaosAudit {
	return &chaosAudit{db: db, table: base + "_chaos_audit", fn: base + "_chaos_audit_fn", trig: base + "_chaos_audit_tr",
		images: base + "_refnode_images", tokens: base + "_refnode_fence_tokens", hbt: base + "_heartbeat"}
}

// install creates the audit table, its function and the trigger; the
// cluster's tables must exist.
func (a *chaosAudit) install(ctx context.Context) error {
	q := func(s string) string { return `"` + s + `"` }
	stmts := []string{
		`CREATE TABLE ` + q(a.table) + ` (seq BIGSERIAL PRIMARY KEY, image TEXT NOT NULL, old_name TEXT NOT NULL, new_name TEXT NOT NULL, ` +
			`token BIGINT, node TEXT, epoch BIGINT, hb_epoch BIGINT, hb_beat_us BIGINT, at_us BIGINT NOT NULL)`,
		`CREATE FUNCTION ` + q(a.fn) + `() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	t RECORD;
	h RECORD;
BEGIN
	SELECT token, node, epoch INTO t FROM ` + q(a.tokens) + ` WHERE resource = NEW.uuid;
	SELECT epoch, beat_us INTO h FROM ` + q(a.hbt) + ` WHERE node = t.node;
	INSERT INTO ` + q(a.table) + ` (image, old_name, new_name, token, node, epoch, hb_epoch, hb_beat_us, at_us)
	VALUES (NEW.uuid, OLD.name, NEW.name, t.token, t.node, t.epoch, h.epoch, h.beat_us,
		(extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
	RETURN NULL;
END $$`,
		`CREATE CONSTRAINT TRIGGER ` + q(a.trig) + ` AFTER UPDATE ON ` + q(a.images) +
			` DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ` + q(a.fn) + `()`,
	}
	for _, s := range stmts {
		if _, err := a.db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("install the audit trigger: %w", err)
		}
	}
	return nil
}

// remove drops the function and with it the trigger (the table goes
// with the cluster's tables), and checks that the function is gone.
func (a *chaosAudit) remove(ctx context.Context) error {
	if _, err := a.db.ExecContext(ctx, `DROP FUNCTION IF EXISTS "`+a.fn+`"() CASCADE`); err != nil {
		return fmt.Errorf("drop the audit function: %w", err)
	}
	var n int
	if err := a.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_proc WHERE proname = $1`, a.fn).Scan(&n); err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("the audit function %s is still there", a.fn)
	}
	return nil
}

// auditRow is one committed update of an image.
type auditRow struct {
	Seq          int64
	Image        string
	Old, New     string
	Token        int64 // 0: no token row
	Node         string
	Epoch        int64
	HBEpoch      int64 // the writer's heartbeat record at the commit; 0: none
	HBBeat, AtUS int64
}

func (r auditRow) at() time.Time { return time.UnixMicro(r.AtUS) }

// String describes the commit for a report.
func (r auditRow) String() string {
	return fmt.Sprintf("commit #%d of image %s: %q -> %q at %s by %s epoch %d token %d", r.Seq, shortID(r.Image), r.Old, r.New,
		r.at().Format(clockFormat), shortID(r.Node), r.Epoch, r.Token)
}

// rows reads every audit row, in commit order.
func (a *chaosAudit) rows(ctx context.Context) ([]auditRow, error) {
	rs, err := a.db.QueryContext(ctx, `SELECT seq, image, old_name, new_name, token, node, epoch, hb_epoch, hb_beat_us, at_us FROM "`+a.table+`" ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("read the audit rows: %w", err)
	}
	defer rs.Close()
	var out []auditRow
	for rs.Next() {
		var r auditRow
		var tok, ep, hbEp, hbBeat sql.NullInt64
		var node sql.NullString
		if err := rs.Scan(&r.Seq, &r.Image, &r.Old, &r.New, &tok, &node, &ep, &hbEp, &hbBeat, &r.AtUS); err != nil {
			return nil, err
		}
		r.Token, r.Node, r.Epoch, r.HBEpoch, r.HBBeat = tok.Int64, node.String, ep.Int64, hbEp.Int64, hbBeat.Int64
		out = append(out, r)
	}
	return out, rs.Err()
}

// dbFigures are the database-side counts; each list holds a description
// of every case.
type dbFigures struct {
	commits        int
	lost           []string
	twice          []string
	refusedApplied []string
	foreign        []string
	stale          []string
	twoOwners      []string
	late           []string
	chainBreaks    []string
	reordered      []string
	afterLease     int // commits after the writer lost its lease (allowed)
	unknownApplied int // calls of unknown outcome that were applied
	unknownNot     int // … and that were not
	lateMax        time.Duration
}

// violations lists the counts that must be zero, by name.
func (f *dbFigures) violations() map[string][]string {
	return map[string][]string{
		"acknowledged writes lost": f.lost, "applied twice": f.twice, "applied though refused": f.refusedApplied,
		"committed names no call wrote": f.foreign, "stale writes": f.stale, "two-owner commits": f.twoOwners,
		"late executions (commit after deadline + bound)": f.late, "broken chains": f.chainBreaks,
		"a client's writes out of issue order": f.reordered,
	}
}

// linkSlack is how much later than its node's decision a commit by node
// at may reach the database: the one-way delay of the node's database
// link if it was slowed then; nil for none.
type linkSlack func(node string, at time.Time) time.Duration

func (s linkSlack) of(node string, at time.Time) time.Duration {
	if s == nil {
		return 0
	}
	return s(node, at)
}

// analyzeAudit checks the audit rows against the calls. images maps an
// image's UUID to its index; init is every image's first name; maxAge is
// the lease (-evict-after); slack the delay of slowed database links.
func analyzeAudit(rows []auditRow, ops []chaosOp, images map[string]int, init string, maxAge time.Duration, slack linkSlack) *dbFigures {
	f := &dbFigures{commits: len(rows)}
	type key struct {
		image int
		name  string
	}
	byName := map[key]chaosOp{}
	for _, o := range ops {
		if o.writes() {
			byName[key{o.Image, o.Value}] = o
		}
	}
	committed := map[key][]auditRow{}
	type perImage struct {
		last      string
		maxToken  int64
		holder    map[int64]string // token -> node/epoch
		lastIssue map[int]auditRow // client -> its latest committed write
	}
	state := map[int]*perImage{}
	for _, r := range rows {
		k, ok := images[r.Image]
		if !ok {
			f.foreign = append(f.foreign, r.String()+" (not an image of the test)")
			continue
		}
		st := state[k]
		if st == nil {
			st = &perImage{last: init, holder: map[int64]string{}, lastIssue: map[int]auditRow{}}
			state[k] = st
		}
		if r.Old != st.last {
			f.chainBreaks = append(f.chainBreaks, fmt.Sprintf("%s, but the previous commit wrote %q", r, st.last))
		}
		st.last = r.New
		if r.Token < st.maxToken {
			f.stale = append(f.stale, fmt.Sprintf("%s, after a commit under token %d", r, st.maxToken))
		}
		st.maxToken = max(st.maxToken, r.Token)
		claim := fmt.Sprintf("%s/%d", r.Node, r.Epoch)
		if h, ok := st.holder[r.Token]; ok && h != claim {
			f.twoOwners = append(f.twoOwners, fmt.Sprintf("%s, token %d was %s's", r, r.Token, h))
		}
		st.holder[r.Token] = claim
		if r.HBEpoch != r.Epoch || r.HBBeat == 0 || time.Duration(r.AtUS-r.HBBeat)*time.Microsecond > maxAge {
			f.afterLease++
		}
		kk := key{k, r.New}
		committed[kk] = append(committed[kk], r)
		o, ok := byName[kk]
		if !ok {
			f.foreign = append(f.foreign, r.String())
			continue
		}
		if o.Kind == chaosCAS && r.Old != o.Expect {
			f.chainBreaks = append(f.chainBreaks, fmt.Sprintf("%s: a cas that expected %q", r, o.Expect))
		}
		if late := r.at().Sub(o.deadline()); late > fdBound+slack.of(r.Node, r.at()) {
			f.late = append(f.late, fmt.Sprintf("%s, %s after the deadline of %s", r, late.Round(time.Millisecond), o))
			f.lateMax = max(f.lateMax, late)
		}
		if prev, ok := st.lastIssue[o.Client]; ok {
			if p := byName[key{k, prev.New}]; p.Seq > o.Seq {
				f.reordered = append(f.reordered, fmt.Sprintf("%s (call #%d) after %s (call #%d)", r, o.Seq, prev, p.Seq))
			}
		}
		st.lastIssue[o.Client] = r
	}
	for _, rs := range committed {
		if len(rs) > 1 {
			var parts []string
			for _, r := range rs {
				parts = append(parts, r.String())
			}
			f.twice = append(f.twice, strings.Join(parts, "; "))
		}
	}
	for _, o := range ops {
		if !o.writes() {
			continue
		}
		applied := len(committed[key{o.Image, o.Value}]) > 0
		switch o.Class {
		case classOK:
			if (o.Kind == chaosWrite || o.Swapped) && !applied {
				f.lost = append(f.lost, o.String())
			}
			if o.Kind == chaosCAS && !o.Swapped && applied {
				f.refusedApplied = append(f.refusedApplied, o.String()+" (replied not set)")
			}
		case classSafe, classNever:
			if applied {
				f.refusedApplied = append(f.refusedApplied, o.String())
			}
		default:
			if applied {
				f.unknownApplied++
			} else {
				f.unknownNot++
			}
		}
	}
	for _, l := range [][]string{f.lost, f.twice, f.refusedApplied, f.foreign, f.stale, f.twoOwners, f.late, f.chainBreaks, f.reordered} {
		slices.Sort(l)
	}
	return f
}

// sortOps sorts calls by invocation.
func sortOps(ops []chaosOp) {
	slices.SortStableFunc(ops, func(a, b chaosOp) int { return cmp.Compare(a.Invoke, b.Invoke) })
}

// TestChaosAudit checks the database-side bookkeeping on made-up calls
// and commits, one case of each violation.
func TestChaosAudit(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	call := func(client, seq int, kind, value, expect, class string, swapped bool) chaosOp {
		return chaosOp{Client: client, Seq: seq, Kind: kind, Value: value, Expect: expect, Class: class, Outcome: class, Swapped: swapped,
			Invoke: ms(0).UnixNano(), Done: ms(10).UnixNano(), Deadline: ms(5000).UnixNano(), OpID: fmt.Sprintf("op-%d-%d", client, seq)}
	}
	ops := []chaosOp{
		call(0, 1, chaosWrite, "c0.1", "", classOK, false),
		call(1, 1, chaosWrite, "c1.1", "", classOK, false), // acknowledged, never committed: lost
		call(0, 2, chaosCAS, "c0.2", "c0.1", classOK, true),
		call(2, 1, chaosWrite, "c2.1", "", classSafe, false), // refused, yet committed
		call(1, 5, chaosWrite, "c1.5", "", classOK, false),
		call(1, 4, chaosWrite, "c1.4", "", classUnknown, false), // committed after its client's later write
		call(0, 3, chaosWrite, "c0.3", "", classUnknown, false), // committed twice, both late
		call(0, 4, chaosWrite, "c0.4", "", classUnknown, false), // neither
		call(2, 2, chaosRead, "", "", classOK, false),
	}
	row := func(seq int64, old, new string, token int64, node string, at int) auditRow {
		return auditRow{Seq: seq, Image: "img", Old: old, New: new, Token: token, Node: node, Epoch: 1, HBEpoch: 1,
			HBBeat: ms(at - 100).UnixMicro(), AtUS: ms(at).UnixMicro()}
	}
	rows := []auditRow{
		row(1, "init", "c0.1", 1, "n1", 5),
		row(2, "c0.1", "c0.2", 1, "n1", 6),
		row(3, "c0.2", "c2.1", 2, "n2", 7),
		row(4, "c2.1", "c1.5", 2, "n3", 8),    // token 2 was n2's
		row(5, "c1.5", "c1.4", 1, "n1", 9),    // token 1 after token 2; client 1's #4 after its #5
		row(6, "c1.4", "c0.3", 3, "n1", 6000), // after the deadline
		row(7, "c0.3", "c0.3", 3, "n1", 6000), // again
		row(8, "x", "zzz", 3, "n1", 6001),     // from nowhere
	}
	rows[1].HBEpoch = 0 // the writer's record was gone at the commit
	f := analyzeAudit(rows, ops, map[string]int{"img": 0}, chaosInitName, 3*time.Second, nil)
	assert.Equal(t, 8, f.commits)
	assert.Len(t, f.lost, 1)
	assert.Contains(t, f.lost[0], `write("c1.1")`)
	require.Len(t, f.twice, 1)
	assert.Contains(t, f.twice[0], "commit #6")
	assert.Len(t, f.refusedApplied, 1)
	assert.Contains(t, f.refusedApplied[0], `write("c2.1")`)
	assert.Len(t, f.foreign, 1)
	assert.Len(t, f.stale, 1)
	assert.Contains(t, f.stale[0], "commit #5")
	assert.Len(t, f.twoOwners, 1)
	assert.Contains(t, f.twoOwners[0], "commit #4")
	assert.Len(t, f.late, 2)
	assert.Equal(t, time.Second, f.lateMax)
	assert.Len(t, f.chainBreaks, 1)
	assert.Contains(t, f.chainBreaks[0], "commit #8")
	assert.Len(t, f.reordered, 1)
	assert.Contains(t, f.reordered[0], "(call #4) after")
	assert.Equal(t, 1, f.afterLease)
	assert.Equal(t, 2, f.unknownApplied, "c1.4 and c0.3")
	assert.Equal(t, 1, f.unknownNot, "c0.4")
	for name, list := range f.violations() {
		assert.NotEmpty(t, list, "the made-up commits break %q", name)
	}

	// A COMMIT sent by the deadline over a slowed database link reaches
	// the database up to the link's one-way delay later.
	windows := []chaosWindow{{start: ms(4000), healed: ms(5000), slowed: []slowedLink{{node: "n1", delay: 300 * time.Millisecond}}}}
	slack := slowedLinks(windows)
	assert.Equal(t, 300*time.Millisecond, slack("n1", ms(5200)))
	assert.Zero(t, slack("n1", ms(5400)), "after the link's last delayed bytes")
	assert.Zero(t, slack("n2", ms(4500)), "another node")
	slow := []chaosOp{call(3, 1, chaosWrite, "c3.1", "", classUnknown, false)}
	slowRows := []auditRow{row(1, "init", "c3.1", 1, "n1", 5200)}
	assert.Len(t, analyzeAudit(slowRows, slow, map[string]int{"img": 0}, chaosInitName, 3*time.Second, nil).late, 1)
	assert.Empty(t, analyzeAudit(slowRows, slow, map[string]int{"img": 0}, chaosInitName, 3*time.Second, slack).late,
		"200 ms after the deadline over a link slowed by 300 ms each way")
}
