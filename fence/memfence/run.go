package memfence

import (
	"context"

	"github.com/cloudbus-go/cloudbus/fence"
)

// Run is [Fence.Do] with a typed reply, as sqlfence.Run is for SQL: fn
// stages its writes and returns its reply, a commit function and an
// error; Run records the reply as JSON ([fence.MarshalReply]) and calls
// commit only if the claim still holds, and returns the reply. A repeat
// of g.Key does not run fn: it returns the recorded reply decoded as T
// ([fence.UnmarshalReply]). The first run returns the recorded JSON
// decoded as T too, so the first run and its repeats return equal values.
//
// If fn fails, nothing is applied or recorded and its error is returned.
// A reply that does not encode as JSON, or whose JSON does not decode back
// as T, fails with message.ErrInternal, and commit is not called. A
// recorded reply that does not decode as T fails with
// message.ErrBadReply: the message ran then. Other errors are Do's.
func Run[T any](ctx context.Context, f *Fence, g fence.Guard, fn func(ctx context.Context, tok fence.Token) (T, func(), error)) (T, error) {
	var replay T
	ran := false
	reply, err := f.Do(ctx, g, func(ctx context.Context, tok fence.Token) ([]byte, func(), error) {
		ran = false
		v, commit, err := fn(ctx, tok)
		if err != nil {
			return nil, nil, err
		}
		data, again, err := fence.MarshalReply(g.Key, v)
		if err != nil {
			return nil, nil, err
		}
		replay, ran = again, true
		return data, commit, nil
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
