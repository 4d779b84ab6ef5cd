package sqlfence_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/rawrows"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/message"
)

// FuzzFenceRows writes arbitrary values into the fence's SQLite tables
// with raw statements, a resource's token row and a message's record
// (type, body hash, done flag and recorded reply, each of any SQL type),
// then runs a fenced, idempotent write of that message on that resource
// through Fence.Do, and reads the holder back. The fence never panics;
// its errors are coded (stale claim, reused id, internal) or say what
// failed. A message with a record never runs again: its recorded reply
// is returned byte for byte if the record is complete and names the same
// message, a reused id fails as bad_request, an incomplete record as
// internal. A message without a record runs once and its reply is
// recorded. A claim that holds gets the stored token, one more if the
// holder changes.
func FuzzFenceRows(f *testing.F) {
	ctx := context.Background()
	url := "sqlite:" + filepath.Join(f.TempDir(), "fence.db")
	p, err := sqlconn.Open(sqlconn.Config{URL: url})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = p.Close() })
	db := p.DB
	hb, err := sqlstore.OpenDB(ctx, db, sqlstore.Config{Dialect: sqlstore.SQLite, Table: "hb"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = hb.Close() })
	// The fuzz run outlasts no day: the node's one beat keeps its claim live.
	fc, err := sqlfence.Open(ctx, db, sqlfence.Config{Dialect: sqlfence.SQLite, HeartbeatTable: hb.Table(), Table: "fz", MaxAge: 24 * time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	const node = "3694776ab31a45709259254a018913ca"
	epoch, err := hb.Register(ctx, node)
	if err != nil {
		f.Fatal(err)
	}
	claim := fence.Claim{Resource: "932763162d054c04adaab6ab498c9139", Node: node, Epoch: epoch}
	key := fence.NewKey("5c0a3a1d0c9f4b2e8a2f1b6c7d8e9f00", "refnode.v1.StartVm", []byte(`{"uuid":"932763162d054c04adaab6ab498c9139"}`))
	const other = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

	// rows: bit 0 a token row, bit 1 a message record. kinds: 3 bits per
	// column (token, node, epoch, uses, type, hash, done, reply); 0 is
	// each column's natural type, with the token row's node and epoch
	// the claim's if sameHolder.
	f.Add(byte(0), uint64(0), int64(5), true, int64(1), "", "", []byte(`{"vm":{}}`), int64(0), 0.0, "")
	f.Add(byte(1), uint64(0), int64(5), true, int64(1), "", "", []byte(`{"vm":{}}`), int64(0), 0.0, "")
	f.Add(byte(1), uint64(0), int64(5), false, int64(1), "", "", []byte(nil), int64(0), 0.0, "")
	f.Add(byte(1), uint64(0), int64(math.MaxInt64), false, int64(1), "", "", []byte(nil), int64(0), 0.0, "")
	f.Add(byte(1), uint64(0), int64(-3), false, int64(1), "", "", []byte(nil), int64(0), 0.0, "")
	f.Add(byte(1), uint64(0o1), int64(0), true, int64(1), "", "", []byte(nil), int64(0), 2.5, "")
	f.Add(byte(1), uint64(0o2), int64(0), true, int64(1), "", "", []byte(nil), int64(0), 0.0, "abc")
	f.Add(byte(3), uint64(0), int64(5), true, int64(1), "", "", []byte(`{"vm":{}}`), int64(0), 0.0, "")
	f.Add(byte(2), uint64(0), int64(5), true, int64(1), "", "", []byte(`recorded`), int64(0), 0.0, "")
	f.Add(byte(2), uint64(0), int64(5), true, int64(0), "", "", []byte(nil), int64(0), 0.0, "")
	f.Add(byte(2), uint64(0), int64(5), true, int64(-7), "", "", []byte{}, int64(0), 0.0, "")
	f.Add(byte(2), uint64(0), int64(5), true, int64(1), "refnode.v1.StopVm", "", []byte(`x`), int64(0), 0.0, "")
	f.Add(byte(2), uint64(0), int64(5), true, int64(1), "", strings.Repeat("0", 64), []byte(`x`), int64(0), 0.0, "")
	f.Add(byte(2), uint64(0o4<<21), int64(5), true, int64(1), "", "", []byte(nil), int64(0), 0.0, "")
	f.Add(byte(2), uint64(0o1<<18), int64(5), true, int64(1), "", "", []byte(nil), int64(0), 1.5, "")
	f.Add(byte(2), uint64(0o2<<18), int64(5), true, int64(1), "", "", []byte(nil), int64(0), 0.0, "yes")
	f.Add(byte(2), uint64(0o3<<18), int64(5), true, int64(1), "", "", []byte(nil), int64(0), 0.0, "")
	f.Add(byte(2), uint64(0o2<<21), int64(5), true, int64(1), "", "", []byte(nil), int64(0), 0.0, "a text reply")
	f.Add(byte(2), uint64(0o5<<21), int64(5), true, int64(1), "", "", []byte(nil), int64(42), 0.0, "")
	f.Fuzz(func(t *testing.T, rows byte, kinds uint64, token int64, sameHolder bool, done int64, typ, hash string, reply []byte, alt int64, fl float64, str string) {
		col := func(i int, natural any) any {
			var b []byte
			if i == 7 {
				b = reply
			}
			return rawrows.Value(kinds>>(3*i), natural, alt, fl, str, b)
		}
		for _, q := range []string{`DELETE FROM "fz_tokens"`, `DELETE FROM "fz_once"`} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		holder, holderEpoch := node, epoch
		if !sameHolder {
			holder, holderEpoch = other, epoch+1
		}
		var tokenRow []any
		if rows&1 != 0 {
			if _, err := db.ExecContext(ctx, `INSERT INTO "fz_tokens" (resource, token, node, epoch, uses) VALUES (?, ?, ?, ?, ?)`,
				claim.Resource, col(0, token), col(1, holder), col(2, holderEpoch), col(3, int64(1))); err == nil {
				tokenRow = rawrows.Row(t, db, `SELECT token, node, epoch FROM "fz_tokens"`, 3)
			}
		}
		if typ == "" {
			typ = key.Type
		}
		if hash == "" {
			hash = key.Hash
		}
		var record []any
		if rows&2 != 0 {
			if _, err := db.ExecContext(ctx, `INSERT INTO "fz_once" (id, type, hash, done, reply, at_us) VALUES (?, ?, ?, ?, ?, ?)`,
				key.ID, col(4, typ), col(5, hash), col(6, done), col(7, reply), time.Now().UnixMicro()); err == nil {
				record = rawrows.Row(t, db, `SELECT type, hash, done, reply FROM "fz_once"`, 4)
			}
		}

		ran := 0
		var gotTok fence.Token
		fresh := []byte("fresh reply")
		run := func(_ context.Context, _ *sql.Tx, tok fence.Token) ([]byte, error) {
			ran++
			gotTok = tok
			return fresh, nil
		}
		out, err := fc.Do(ctx, fence.Guard{Claim: claim, Key: key}, run)
		if err != nil {
			checkFenceError(t, err)
		}
		if record != nil && ran > 0 {
			t.Fatalf("a message with a record %v ran again", record)
		}
		if err == nil && record == nil {
			if ran != 1 || !bytes.Equal(out, fresh) {
				t.Fatalf("a new message ran %d times and replied %q", ran, out)
			}
			again, err := fc.Do(ctx, fence.Guard{Claim: claim, Key: key}, run)
			if err != nil || ran != 1 || !bytes.Equal(again, fresh) {
				t.Fatalf("a repeated message ran again (%d) or lost its reply: %q, %v", ran, again, err)
			}
		}
		if err == nil && record != nil {
			checkReplay(t, record, key, out)
		}
		if record != nil && err != nil {
			checkRecordError(t, record, key, err)
		}
		if err == nil && ran == 1 {
			checkToken(t, tokenRow, claim, gotTok)
		}
		c, tok, ok, herr := fc.Holder(ctx, claim.Resource)
		if herr != nil {
			if !strings.HasPrefix(herr.Error(), "sqlfence: read the holder of ") {
				t.Fatalf("Holder fails without saying so: %v", herr)
			}
			return
		}
		if ran == 1 && (!ok || c.Node != node || c.Epoch != epoch || tok != gotTok) {
			t.Fatalf("after a write with token %d the holder is %v, token %d, %v", gotTok, c, tok, ok)
		}
	})
}

// checkFenceError fails unless err is coded or says what failed.
func checkFenceError(t *testing.T, err error) {
	t.Helper()
	var me *message.Error
	if errors.As(err, &me) && slices.Contains(message.Codes(), me.Code) {
		return
	}
	if !strings.HasPrefix(err.Error(), "sqlfence: ") {
		t.Fatalf("error %q is neither coded nor says what failed", err)
	}
}

// storedText returns a stored text or blob as a scan into a string gives it.
func storedText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// checkReplay: a record that replays names the message, is complete,
// and gives its stored reply byte for byte.
func checkReplay(t *testing.T, record []any, key fence.Key, out []byte) {
	t.Helper()
	if typ, ok := storedText(record[0]); ok && typ != key.Type {
		t.Fatalf("replayed the record of a %q for a %q", typ, key.Type)
	}
	if hash, ok := storedText(record[1]); ok && hash != key.Hash {
		t.Fatalf("replayed the record of body hash %q for %q", hash, key.Hash)
	}
	if n, ok := record[2].(int64); ok && n == 0 {
		t.Fatalf("replayed a record without its reply (done 0): %q", out)
	}
	switch v := record[3].(type) {
	case nil:
		if len(out) != 0 {
			t.Fatalf("replayed %q from a NULL reply", out)
		}
	case []byte, string:
		want, _ := storedText(v)
		if string(out) != want {
			t.Fatalf("replayed %q from the stored reply %q", out, want)
		}
	}
}

// checkRecordError: a record that names another message fails as a
// reused id, an incomplete one as internal.
func checkRecordError(t *testing.T, record []any, key fence.Key, err error) {
	t.Helper()
	if errors.Is(err, fence.ErrStale) {
		return // the claim was refused first
	}
	for _, op := range []string{"sqlfence: begin", "sqlfence: lock the token", "sqlfence: check the claim", "sqlfence: claim the resource"} {
		if strings.HasPrefix(err.Error(), op) {
			return // the claim's check failed first, on an unreadable token row
		}
	}
	typ, ok1 := storedText(record[0])
	hash, ok2 := storedText(record[1])
	if _, ok := record[2].(int64); !ok {
		return // a done flag that is no integer cannot be read: any error will do
	}
	if ok1 && ok2 && (typ != key.Type || hash != key.Hash) {
		if !errors.Is(err, fence.ErrKeyReused) || !errors.Is(err, message.ErrBadRequest) {
			t.Fatalf("a record of another message (%q, %q) gives %v, want a reused id", typ, hash, err)
		}
		return
	}
	if n, ok := record[2].(int64); ok && ok1 && ok2 && n == 0 && !errors.Is(err, message.ErrInternal) {
		t.Fatalf("a record without its reply gives %v, want internal", err)
	}
}

// checkToken: a claim that holds gets the stored token, one more if the
// holder changed; a resource without a row gets token 1.
func checkToken(t *testing.T, row []any, c fence.Claim, got fence.Token) {
	t.Helper()
	if row == nil {
		if got != 1 {
			t.Fatalf("the first claim of a resource got token %d, want 1", got)
		}
		return
	}
	tok, ok := row[0].(int64)
	if !ok {
		return
	}
	node, _ := storedText(row[1])
	ep, _ := row[2].(int64)
	want := tok
	if node != c.Node || ep != c.Epoch {
		if tok == math.MaxInt64 {
			t.Fatalf("a token moved past the largest one, %d, to %d", tok, got)
		}
		want++
	}
	if int64(got) != want {
		t.Fatalf("stored token %d (holder %q/%d), claim %v: got token %d, want %d", tok, node, ep, c, got, want)
	}
}
