package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/sqlgolden"
	"github.com/cloudbus-go/cloudbus/message"
)

// The golden state: the fence's tables after a few fenced writes and
// messages, as the fence keeps them. The golden files
// (testdata/golden/v<N>.sql) hold it in every schema version's form; see
// package internal/sqlgolden for the format and TestGolden for what is
// checked. The heartbeat table the fence reads has golden files of its
// own, in heartbeat/sqlstore.
const (
	// goldenTable and goldenHeartbeat are the placeholder table names of
	// the golden files: the fence's prefix and the heartbeat table.
	goldenTable     = "golden_fence"
	goldenHeartbeat = "golden_heartbeat"

	goldenNodeA = "6f5e4d3c2b1a40998877665544332201"
	goldenNodeB = "6f5e4d3c2b1a40998877665544332202"

	// goldenRes1 was claimed once, by A, with message goldenMsg1.
	goldenRes1 = "7a6b5c4d3e2f40118293a4b5c6d7e801"
	// goldenRes2 was claimed by A, then taken over by B, which claimed
	// it again.
	goldenRes2 = "7a6b5c4d3e2f40118293a4b5c6d7e802"
	// goldenRes3 was claimed by A, then by A's next life.
	goldenRes3 = "7a6b5c4d3e2f40118293a4b5c6d7e803"

	goldenMsg1 = "8b7c6d5e4f3a40218293a4b5c6d7e801" // handled: a JSON reply
	goldenMsg2 = "8b7c6d5e4f3a40218293a4b5c6d7e802" // handled: no reply
	goldenMsg3 = "8b7c6d5e4f3a40218293a4b5c6d7e803" // handled: a binary reply
	goldenMsg4 = "8b7c6d5e4f3a40218293a4b5c6d7e804" // begun, committed without its reply
	goldenMsg5 = "8b7c6d5e4f3a40218293a4b5c6d7e805" // its transaction failed: no record
)

// The golden messages' bodies and replies.
var (
	goldenBody1  = []byte(`{"uuid":"7a6b5c4d3e2f40118293a4b5c6d7e801"}`)
	goldenReply1 = []byte(`{"vm":{"uuid":"7a6b5c4d3e2f40118293a4b5c6d7e801","state":"running"},"handled_by":"6f5e4d3c2b1a40998877665544332201"}`)
	goldenBody2  = []byte(`{}`)
	goldenBody3  = []byte("\x00binary body\xff")
	goldenReply3 = []byte("\x00\xff\x80'\n\"reply\"")
	goldenBody4  = []byte(`{"n":4}`)
	goldenBody5  = []byte(`{"n":5}`)
)

// goldenTables are the fence's tables.
var goldenTables = []string{goldenTable + "_tokens", goldenTable + "_once", goldenTable + "_meta"}

// TestGolden keeps the fence's tables of every schema version readable:
// each golden file testdata/golden/v<N>.sql is loaded into a new SQLite
// database, the fence opens it with today's code (migrating it), and
// every token and message record is read back through the fence and
// compared with the values written below; then the fence must go on
// working on those rows (claims, replays, sweeps). Subtest "current"
// checks that today's code creates the tables of the newest file and
// writes the golden state as it says. After a schema change (a new
// migration), run
//
//	go test ./fence/sqlfence -run TestGolden -update-golden
//
// which writes the new version's file; keep the old ones.
func TestGolden(t *testing.T) {
	t.Parallel()
	sqlgolden.Run(t, sqlgolden.Store{
		Pkg:    "./fence/sqlfence",
		Tables: goldenTables,
		Meta:   goldenTable + "_meta",
		Open: func(t *testing.T, p *sqlconn.Pool, _ string) io.Closer {
			_, err := sqlfence.Open(t.Context(), p.DB, goldenConfig)
			require.NoError(t, err, "today's fence must open (and migrate) the tables")
			return io.NopCloser(nil) // a Fence holds nothing to close
		},
		Write: writeFenceGolden,
		Check: checkFenceGolden,
	})
}

// goldenConfig is the golden fence's configuration.
var goldenConfig = sqlfence.Config{Dialect: sqlfence.SQLite, HeartbeatTable: goldenHeartbeat, Table: goldenTable}

// writeFenceGolden writes the golden state with a real fence of today's
// code, on a real heartbeat store, and returns the golden file's header.
// Values that come from the database's clock (the claimants' epochs, the
// messages' times) are then pinned to fixed ones, so the file does not
// change from run to run.
func writeFenceGolden(t *testing.T, p *sqlconn.Pool, url string) []string {
	ctx := t.Context()
	hb, err := sqlstore.OpenDB(ctx, p.DB, sqlstore.Config{URL: url, Table: goldenHeartbeat})
	require.NoError(t, err)
	defer hb.Close()
	f, err := sqlfence.Open(ctx, p.DB, goldenConfig)
	require.NoError(t, err)

	register := func(node string) int64 {
		e, err := hb.Register(ctx, node)
		require.NoError(t, err)
		return e
	}
	do := func(w fence.Guard, reply []byte, fail error) (fence.Token, error) {
		var tok fence.Token
		_, err := f.Do(ctx, w, func(_ context.Context, _ *sql.Tx, t fence.Token) ([]byte, error) {
			tok = t
			return reply, fail
		})
		return tok, err
	}
	claim := func(resource, node string, epoch int64, want fence.Token) {
		tok, err := do(fence.Guard{Claim: fence.Claim{Resource: resource, Node: node, Epoch: epoch}}, nil, nil)
		require.NoError(t, err)
		require.Equal(t, want, tok)
	}
	a1, b := register(goldenNodeA), register(goldenNodeB)

	tok, err := do(fence.Guard{
		Claim: fence.Claim{Resource: goldenRes1, Node: goldenNodeA, Epoch: a1},
		Key:   fence.NewKey(goldenMsg1, "refnode.v1.StartVm", goldenBody1),
	}, goldenReply1, nil)
	require.NoError(t, err)
	require.Equal(t, fence.Token(1), tok)
	claim(goldenRes2, goldenNodeA, a1, 1)
	claim(goldenRes2, goldenNodeB, b, 2)
	claim(goldenRes2, goldenNodeB, b, 2)
	claim(goldenRes3, goldenNodeA, a1, 1)
	a2 := register(goldenNodeA)
	claim(goldenRes3, goldenNodeA, a2, 2)

	_, err = do(fence.Guard{Key: fence.NewKey(goldenMsg2, "refnode.v1.AddHost", goldenBody2)}, nil, nil)
	require.NoError(t, err)
	_, err = do(fence.Guard{Key: fence.NewKey(goldenMsg3, "test.Binary", goldenBody3)}, goldenReply3, nil)
	require.NoError(t, err)
	tx, err := p.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, done, err := f.Begin(ctx, tx, fence.NewKey(goldenMsg4, "refnode.v1.StopVm", goldenBody4))
	require.NoError(t, err)
	require.False(t, done)
	require.NoError(t, tx.Commit(), "a transaction that skipped Finish")
	_, err = do(fence.Guard{Key: fence.NewKey(goldenMsg5, "refnode.v1.RebootVm", goldenBody5)}, nil, message.ErrBusy.WithDetails("golden: the handler failed"))
	require.ErrorIs(t, err, message.ErrBusy)

	// The clock's values, pinned: microseconds since 1970.
	for _, q := range []string{
		`UPDATE "golden_fence_tokens" SET epoch = 1748779200000000 WHERE resource = '` + goldenRes1 + `'`,
		`UPDATE "golden_fence_tokens" SET epoch = 1748779201000000 WHERE resource = '` + goldenRes2 + `'`,
		`UPDATE "golden_fence_tokens" SET epoch = 1748779203000000 WHERE resource = '` + goldenRes3 + `'`,
		`UPDATE "golden_fence_once" SET at_us = 1740787200000000 WHERE id = '` + goldenMsg1 + `'`,
		`UPDATE "golden_fence_once" SET at_us = 1740873600000000 WHERE id = '` + goldenMsg2 + `'`,
		`UPDATE "golden_fence_once" SET at_us = 1743465600000000 WHERE id = '` + goldenMsg3 + `'`,
		`UPDATE "golden_fence_once" SET at_us = 1743552000000000 WHERE id = '` + goldenMsg4 + `'`,
	} {
		_, err := p.DB.ExecContext(ctx, q)
		require.NoError(t, err)
	}

	var version int
	require.NoError(t, p.DB.QueryRowContext(ctx, `SELECT version FROM "golden_fence_meta" WHERE id = 1`).Scan(&version))
	return []string{
		fmt.Sprintf("Golden file of fence/sqlfence: schema version %d, as today's code stores it in SQLite.", version),
		"Written by a real fence (writeFenceGolden in golden_test.go), the database clock's values pinned, with",
		"\tgo test ./fence/sqlfence -run TestGolden -update-golden",
		"Do not edit, and keep it forever: TestGolden loads it, opens the fence on it and reads every row back.",
		"The heartbeat table the fence reads (golden_heartbeat) has golden files of its own, in heartbeat/sqlstore.",
	}
}

// checkFenceGolden opens a fence of today's code on p's database, a
// golden file of schema version v, and reads it back.
func checkFenceGolden(t *testing.T, v int, p *sqlconn.Pool, url string) {
	ctx := t.Context()
	cfg := goldenConfig
	f, err := sqlfence.Open(ctx, p.DB, cfg)
	require.NoError(t, err, "today's fence must open (and migrate) tables of schema version %d", v)

	// Written by hand, not derived from the generator: what the rows
	// mean. Epochs are the claimants' heartbeat epochs.
	type holder struct {
		claim fence.Claim
		token fence.Token
	}
	holders := func() []holder {
		var out []holder
		for _, r := range []string{goldenRes1, goldenRes2, goldenRes3} {
			c, tok, ok, err := f.Holder(ctx, r)
			require.NoError(t, err)
			require.True(t, ok, "resource %s: the golden token must be there", r)
			out = append(out, holder{c, tok})
		}
		return out
	}
	want := []holder{
		{fence.Claim{Resource: goldenRes1, Node: goldenNodeA, Epoch: 1748779200000000}, 1},
		{fence.Claim{Resource: goldenRes2, Node: goldenNodeB, Epoch: 1748779201000000}, 2},
		{fence.Claim{Resource: goldenRes3, Node: goldenNodeA, Epoch: 1748779203000000}, 2},
	}
	assert.Equal(t, want, holders(), "Holder must read every golden token: holder's node and epoch, token")
	_, _, ok, err := f.Holder(ctx, goldenMsg1)
	require.NoError(t, err)
	assert.False(t, ok, "no token for a resource never claimed")
	// No method reads the count of checks (uses, kept so that MySQL
	// counts every check as a changed row): read it in SQL.
	uses := func() map[string]int64 {
		out := map[string]int64{}
		rows, err := p.DB.QueryContext(ctx, `SELECT resource, uses FROM "golden_fence_tokens"`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var r string
			var n int64
			require.NoError(t, rows.Scan(&r, &n))
			out[r] = n
		}
		require.NoError(t, rows.Err())
		return out
	}
	assert.Equal(t, map[string]int64{goldenRes1: 1, goldenRes2: 3, goldenRes3: 2}, uses(), "every check counted in uses")

	// Replays: a delivery of a recorded message gets its first reply,
	// and its transaction does not run.
	mustNotRun := func(context.Context, *sql.Tx, fence.Token) ([]byte, error) {
		t.Error("a recorded message's transaction ran again")
		return nil, errors.New("ran")
	}
	replay := func(id, typ string, body []byte) ([]byte, error) {
		return f.Do(ctx, fence.Guard{Key: fence.NewKey(id, typ, body)}, mustNotRun)
	}
	reply, err := replay(goldenMsg1, "refnode.v1.StartVm", goldenBody1)
	require.NoError(t, err)
	assert.Equal(t, goldenReply1, reply, "the recorded JSON reply, byte for byte")
	reply, err = replay(goldenMsg2, "refnode.v1.AddHost", goldenBody2)
	require.NoError(t, err)
	assert.Empty(t, reply, "a transaction that replied nothing replays nothing")
	reply, err = replay(goldenMsg3, "test.Binary", goldenBody3)
	require.NoError(t, err)
	assert.Equal(t, []byte("\x00\xff\x80'\n\"reply\""), reply, "the recorded binary reply, byte for byte")
	_, err = replay(goldenMsg4, "refnode.v1.StopVm", goldenBody4)
	assert.ErrorIs(t, err, message.ErrInternal, "a record without its reply (done = 0) is an internal error")
	assert.ErrorContains(t, err, "recorded without its reply")
	_, err = replay(goldenMsg1, "refnode.v1.StopVm", goldenBody1)
	assert.ErrorIs(t, err, fence.ErrKeyReused, "the golden record's type is compared")
	_, err = replay(goldenMsg1, "refnode.v1.StartVm", []byte(`{}`))
	assert.ErrorIs(t, err, fence.ErrKeyReused, "the golden record's body hash is compared")
	ran := false
	_, err = f.Do(ctx, fence.Guard{Key: fence.NewKey(goldenMsg5, "refnode.v1.RebootVm", goldenBody5)}, func(context.Context, *sql.Tx, fence.Token) ([]byte, error) {
		ran = true
		return []byte("now"), nil
	})
	require.NoError(t, err)
	assert.True(t, ran, "a message whose transaction failed left no record: it runs")

	// Claims go on from the golden tokens. B's live record, with the
	// golden epoch of its claim on goldenRes2 (the heartbeat table is
	// not in this golden file; an UPDATE gives the record that epoch).
	hb, err := sqlstore.OpenDB(ctx, p.DB, sqlstore.Config{URL: url, Table: goldenHeartbeat})
	require.NoError(t, err)
	defer func() { assert.NoError(t, hb.Close()) }()
	_, err = hb.Register(ctx, goldenNodeB)
	require.NoError(t, err)
	_, err = p.DB.ExecContext(ctx, `UPDATE "golden_heartbeat" SET epoch = 1748779201000000 WHERE node = ?`, goldenNodeB)
	require.NoError(t, err)
	a, err := hb.Register(ctx, goldenNodeA)
	require.NoError(t, err)
	claim := func(c fence.Claim) fence.Token {
		var tok fence.Token
		_, err := f.Do(ctx, fence.Guard{Claim: c}, func(_ context.Context, _ *sql.Tx, t fence.Token) ([]byte, error) {
			tok = t
			return nil, nil
		})
		require.NoError(t, err, "claim %s", c)
		return tok
	}
	assert.Equal(t, fence.Token(2), claim(fence.Claim{Resource: goldenRes2, Node: goldenNodeB, Epoch: 1748779201000000}), "the golden holder's claim keeps its token")
	assert.Equal(t, fence.Token(2), claim(fence.Claim{Resource: goldenRes1, Node: goldenNodeB, Epoch: 1748779201000000}), "a new holder gets the golden token plus 1")
	assert.Equal(t, fence.Token(3), claim(fence.Claim{Resource: goldenRes3, Node: goldenNodeA, Epoch: a}), "the holder's new life gets the golden token plus 1")
	want = []holder{
		{fence.Claim{Resource: goldenRes1, Node: goldenNodeB, Epoch: 1748779201000000}, 2},
		{fence.Claim{Resource: goldenRes2, Node: goldenNodeB, Epoch: 1748779201000000}, 2},
		{fence.Claim{Resource: goldenRes3, Node: goldenNodeA, Epoch: a}, 3},
	}
	assert.Equal(t, want, holders())
	assert.Equal(t, map[string]int64{goldenRes1: 2, goldenRes2: 4, goldenRes3: 3}, uses())

	// Sweep by age: at_us is microseconds since 1970. Records from
	// before 2025-03-15 (messages 1 and 2) go, later ones stay.
	cfg.Retention = time.Since(time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC))
	swept, err := sqlfence.Open(ctx, p.DB, cfg)
	require.NoError(t, err)
	n, err := swept.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "Sweep deletes the golden records older than Retention")
	ran = false
	_, err = f.Do(ctx, fence.Guard{Key: fence.NewKey(goldenMsg1, "refnode.v1.StartVm", goldenBody1)}, func(context.Context, *sql.Tx, fence.Token) ([]byte, error) {
		ran = true
		return nil, nil
	})
	require.NoError(t, err)
	assert.True(t, ran, "a swept message runs again")
	reply, err = replay(goldenMsg3, "test.Binary", goldenBody3)
	require.NoError(t, err)
	assert.Equal(t, goldenReply3, reply, "a newer record stays")
}
