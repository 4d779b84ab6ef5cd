package sqlfence_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

// BenchmarkWrite compares one write transaction on PostgreSQL without a
// fence, with a fence whose token the writer already holds (the steady
// state), with a fence that moves each resource's token to the writer
// (what a node taking resources over pays, once per resource, on its
// first write of each), and with a fence and a message record:
//
//	CLOUDBUS_POSTGRES_DSN=... go test -run '^$' -bench Write ./fence/sqlfence
func BenchmarkWrite(b *testing.B) {
	url := testenv.PostgresDSN(b)
	e := openB(b, url)
	ctx := context.Background()
	nodes := make([]fence.Claim, 2)
	for i := range nodes {
		id := message.NewUUID()
		epoch, err := e.hb.Register(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = fence.Claim{Node: id, Epoch: epoch}
	}
	write := func(ctx context.Context, tx *sql.Tx, res string) error {
		_, err := tx.ExecContext(ctx, e.ins, res, "v", 0)
		return err
	}
	res := message.NewUUID()
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := write(ctx, tx, res); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	do := func(b *testing.B, w fence.Guard) {
		if _, err := e.f.Do(ctx, w, func(ctx context.Context, tx *sql.Tx, _ fence.Token) ([]byte, error) {
			return nil, write(ctx, tx, w.Claim.Resource)
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("fenced", func(b *testing.B) {
		c := nodes[0]
		c.Resource = res
		for b.Loop() {
			do(b, fence.Guard{Claim: c})
		}
	})
	b.Run("fenced-takeover", func(b *testing.B) {
		i := 0
		for b.Loop() {
			c := nodes[i%2]
			c.Resource = res
			do(b, fence.Guard{Claim: c})
			i++
		}
	})
	b.Run("fenced-idempotent", func(b *testing.B) {
		c := nodes[0]
		c.Resource = res
		for b.Loop() {
			do(b, fence.Guard{Claim: c, Key: fence.NewKey(message.NewUUID(), "bench", []byte("{}"))})
		}
	})
}
