package sqlfence

import (
	"context"
	"database/sql"

	"github.com/cloudbus-go/cloudbus/fence"
)

// Run is [Fence.Do] with a typed reply: it runs fn at most once, with
// g.Claim's token, in a transaction of f guarded by g, records fn's reply
// as JSON with the transaction ([fence.MarshalReply]), and returns it. A
// repeat of g.Key does not run fn: it returns the recorded reply decoded
// as T ([fence.UnmarshalReply]). The first run returns the recorded JSON
// decoded as T too, so the first run and its repeats return equal values
// (a field JSON leaves out is zero in both).
//
// If fn fails, nothing commits or is recorded and its error is returned.
// A reply that does not encode as JSON, or whose JSON does not decode back
// as T, fails with message.ErrInternal, and nothing commits. A recorded
// reply that does not decode as T (T changed between releases, or
// another handler recorded it) fails with message.ErrBadReply: the
// message ran then. Other errors are Do's. Run is safe for concurrent
// use, as Do is.
func Run[T any](ctx context.Context, f *Fence, g fence.Guard, fn func(ctx context.Context, tx *sql.Tx, tok fence.Token) (T, error)) (T, error) {
	var replay T
	ran := false
	reply, err := f.Do(ctx, g, func(ctx context.Context, tx *sql.Tx, tok fence.Token) ([]byte, error) {
		ran = false
		v, err := fn(ctx, tx, tok)
		if err != nil {
			return nil, err
		}
		data, again, err := fence.MarshalReply(g.Key, v)
		if err != nil {
			return nil, err
		}
		replay, ran = again, true
		return data, nil
	})
	if err != nil {
		var zero T
		return zero, err
	}
	if ran {
		return replay, nil
	}
	return fence.UnmarshalReply[T](g.Key, reply)
}
