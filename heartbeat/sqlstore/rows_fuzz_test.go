package sqlstore_test

import (
	"context"
	"database/sql"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/rawrows"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// FuzzHeartbeatRows writes arbitrary values into the heartbeat store's
// SQLite tables with raw statements (a membership row, the meta row's
// last_epoch and a queue-book row) and reads them back through the
// store's API (List, Register, Queues, RemoveQueues). The store never
// panics and returns either an error (wrapped with what failed) or
// records true to the stored values: a stored integer is read as is, an
// age and a bus-down time are never negative, a bus-down time is zero
// exactly when the stored stamp is, a new epoch is above the last one
// issued, and what Queues lists RemoveQueues can forget.
func FuzzHeartbeatRows(f *testing.F) {
	ctx := context.Background()
	url := "sqlite:" + filepath.Join(f.TempDir(), "heartbeat.db")
	p, err := sqlconn.Open(sqlconn.Config{URL: url})
	if err != nil {
		f.Fatal(err)
	}
	s, err := sqlstore.OpenDB(ctx, p.DB, sqlstore.Config{URL: url, Table: "hb"})
	if err != nil {
		_ = p.Close()
		f.Fatal(err)
	}
	f.Cleanup(func() {
		_ = s.Close()
		_ = p.Close()
	})
	db := p.DB

	const node = "3694776ab31a45709259254a018913ca"
	now := time.Now().UnixMicro()
	// kinds: 3 bits per column (node, epoch, seq, beat_us, bus_down_us,
	// last_epoch, queue node, queue); 0 is each column's natural type.
	f.Add(uint64(0), node, int64(7), int64(3), now, int64(0), int64(6), "cloudbus.message.vm."+node, int64(0), 1.5, "x", []byte("b"))
	f.Add(uint64(0), node, int64(7), int64(3), now-5_000_000, now-2_000_000, int64(math.MaxInt64-1), "q", int64(0), 0.0, "", []byte(nil))
	// Stamps so old that the ages, in microseconds, overflow a Duration
	// (List once returned them negative: a node never evicted).
	f.Add(uint64(0), node, int64(1), int64(0), int64(-1)<<60, int64(-1)<<60, int64(0), "q", int64(0), 0.0, "", []byte(nil))
	f.Add(uint64(0), node, int64(1), int64(0), int64(math.MinInt64), int64(0), int64(math.MaxInt64), "q", int64(0), 0.0, "", []byte(nil))
	f.Add(uint64(0), node, int64(1), int64(0), now+3_600_000_000, int64(1), int64(-5), "q", int64(0), 0.0, "", []byte(nil))
	f.Add(uint64(0o1111_1111), node, int64(1), int64(1), now, int64(0), int64(0), "q", int64(0), 1e300, "", []byte(nil))
	f.Add(uint64(0o2222_2222), node, int64(1), int64(1), now, int64(0), int64(0), "q", int64(0), 0.0, "12abc", []byte(nil))
	f.Add(uint64(0o3333_3333), node, int64(1), int64(1), now, int64(0), int64(0), "q", int64(0), 0.0, "", []byte("\xff\x00"))
	f.Add(uint64(0o4444_4444), node, int64(1), int64(1), now, int64(0), int64(0), "q", int64(0), 0.0, "", []byte(nil))
	f.Add(uint64(0o6666_6666), node, int64(1), int64(1), now, int64(0), int64(0), "q", int64(0), 0.0, "", []byte(nil))
	f.Add(uint64(0o0005_0000), node, int64(1), int64(1), now, int64(0), int64(0), "q", int64(-1)<<62, 0.0, "", []byte(nil))
	f.Fuzz(func(t *testing.T, kinds uint64, nodeV string, epoch, seq, beat, busDown, lastEpoch int64, queue string, alt int64, fl float64, str string, blob []byte) {
		col := func(i int, natural any) any { return rawrows.Value(kinds>>(3*i), natural, alt, fl, str, blob) }
		for _, q := range []string{`DELETE FROM "hb"`, `DELETE FROM "hb_queues"`} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		// One membership row.
		_, err := db.ExecContext(ctx, `INSERT INTO "hb" (node, epoch, seq, beat_us, bus_down_us) VALUES (?, ?, ?, ?, ?)`,
			col(0, nodeV), col(1, epoch), col(2, seq), col(3, beat), col(4, busDown))
		if err == nil {
			checkList(t, s, db)
		}
		// The meta row's last epoch, then a registration that reads it.
		if _, err := db.ExecContext(ctx, `UPDATE "hb_meta" SET last_epoch = ? WHERE id = 1`, col(5, lastEpoch)); err == nil {
			checkRegister(t, s, db)
		}
		// One queue-book row.
		if _, err := db.ExecContext(ctx, `INSERT INTO "hb_queues" (node, queue) VALUES (?, ?)`, col(6, nodeV), col(7, queue)); err == nil {
			checkQueues(t, s, db)
		}
	})
}

// checkList: List returns the row true to its stored values, or an error.
func checkList(t *testing.T, s *sqlstore.Store, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	stored := rawrows.Row(t, db, `SELECT node, epoch, seq, beat_us, bus_down_us FROM "hb"`, 5)
	recs, err := s.List(ctx)
	if err != nil {
		checkWrapped(t, "list", err)
		return
	}
	if len(recs) != 1 {
		t.Fatalf("List returned %d records from one row %v", len(recs), stored)
	}
	r := recs[0]
	if text, ok := storedText(stored[0]); ok && r.Node != text {
		t.Fatalf("List read node %q from the stored %q", r.Node, text)
	}
	if n, ok := stored[1].(int64); ok && r.Epoch != n {
		t.Fatalf("List read epoch %d from the stored %d", r.Epoch, n)
	}
	if n, ok := stored[2].(int64); ok && r.Seq != n {
		t.Fatalf("List read seq %d from the stored %d", r.Seq, n)
	}
	if r.Age < 0 || r.BusDown < 0 {
		t.Fatalf("List read a negative age %v or bus-down time %v from %v", r.Age, r.BusDown, stored)
	}
	if n, ok := stored[4].(int64); ok && (n == 0) != (r.BusDown == 0) {
		t.Fatalf("List read bus-down time %v from the stored stamp %d: zero exactly when the stamp is", r.BusDown, n)
	}
	if b, ok := stored[3].(int64); ok {
		// The age is the database's clock less the stamp, at least 0,
		// read between before and after.
		before, after := dbNow(t, s), time.Now().UnixMicro()+1_000_000
		lo, hi := max(before-1_000_000-b, 0), max(after-b, 0)
		if lo >= 0 && hi <= math.MaxInt64/1000 {
			if us := r.Age.Microseconds(); us < lo || us > hi {
				t.Fatalf("List read age %v from stamp %d at about %d: want %d to %d µs", r.Age, b, before, lo, hi)
			}
		}
	}
}

// checkRegister: a registration after the meta row was changed issues an
// epoch above the last one, or fails.
func checkRegister(t *testing.T, s *sqlstore.Store, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	stored := rawrows.Row(t, db, `SELECT last_epoch FROM "hb_meta" WHERE id = 1`, 1)
	const other = "5c0a3a1d0c9f4b2e8a2f1b6c7d8e9f00"
	epoch, err := s.Register(ctx, other)
	if err != nil {
		checkWrapped(t, "register node "+other, err)
		return
	}
	if epoch <= 0 {
		t.Fatalf("Register issued epoch %d after last_epoch %v", epoch, stored[0])
	}
	if last, ok := stored[0].(int64); ok && epoch <= last {
		t.Fatalf("Register issued epoch %d, not above the last one issued, %d", epoch, last)
	}
	if err := s.Deregister(ctx, other, epoch); err != nil {
		t.Fatalf("deregister the epoch just issued: %v", err)
	}
}

// checkQueues: Queues lists the row as stored, and RemoveQueues forgets
// what Queues listed when the row holds text, as the store writes it.
func checkQueues(t *testing.T, s *sqlstore.Store, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	stored := rawrows.Row(t, db, `SELECT node, queue FROM "hb_queues"`, 2)
	got, err := s.Queues(ctx)
	if err != nil {
		checkWrapped(t, "list queues", err)
		return
	}
	if len(got) != 1 {
		t.Fatalf("Queues returned %v from one row %v", got, stored)
	}
	for n, qs := range got {
		if len(qs) != 1 {
			t.Fatalf("Queues returned %v from one row %v", got, stored)
		}
		if text, ok := storedText(stored[0]); ok && n != text {
			t.Fatalf("Queues read node %q from the stored %q", n, text)
		}
		if text, ok := storedText(stored[1]); ok && qs[0] != text {
			t.Fatalf("Queues read queue %q from the stored %q", qs[0], text)
		}
		_, nodeText := stored[0].(string)
		_, queueText := stored[1].(string)
		if !nodeText || !queueText {
			return
		}
		if err := s.RemoveQueues(ctx, n, qs); err != nil {
			t.Fatalf("RemoveQueues(%q, %q) of what Queues listed: %v", n, qs, err)
		}
		if left, err := s.Queues(ctx); err != nil || len(left) != 0 {
			t.Fatalf("RemoveQueues(%q, %q) of what Queues listed left %v (%v)", n, qs, left, err)
		}
	}
}

// checkWrapped fails unless err names the store's operation: the store's
// errors are "sqlstore: OP[: STEP] on URL: ERR".
func checkWrapped(t *testing.T, op string, err error) {
	t.Helper()
	if msg := err.Error(); !strings.HasPrefix(msg, "sqlstore: "+op) || !strings.Contains(msg, " on sqlite:") {
		t.Fatalf("error %q does not say what failed (want %q ... on sqlite:...)", err, "sqlstore: "+op)
	}
}

// storedText returns a stored text or blob as the string a scan into a
// string gives.
func storedText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

func dbNow(t *testing.T, s *sqlstore.Store) int64 {
	t.Helper()
	now, _, err := s.StoreTime(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMicro()
}
