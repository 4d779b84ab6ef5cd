package fence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/cloudbus-go/cloudbus/message"
)

// MarshalReply encodes v, the reply of a transaction guarded by a Guard
// with key k, as the JSON a fence records for it, and returns that JSON
// with the value a repeat of k will get: the JSON decoded as T by
// [UnmarshalReply]. A typed fenced transaction (sqlfence.Run,
// memfence.Run) returns that value on its first run too, so the first
// run and its repeats return equal values. k only names the message in
// errors; it may be zero.
//
// A reply that does not encode as JSON, or whose JSON does not decode
// back as T, fails with an error matching message.ErrInternal that names
// T: record nothing then, and roll back.
func MarshalReply[T any](k Key, v T) ([]byte, T, error) {
	var zero T
	data, err := json.Marshal(v)
	if err != nil {
		return nil, zero, message.ErrInternal.WithDetails(fmt.Sprintf(
			"fence: the reply to %s, a %s, does not encode as JSON, so it cannot be recorded; nothing was recorded",
			keyName(k), typeName[T]())).WithCause(err)
	}
	replay, err := decodeStrict[T](data)
	if err != nil {
		return nil, zero, message.ErrInternal.WithDetails(fmt.Sprintf(
			"fence: the reply to %s, a %s, encodes as JSON that does not decode back as %s, so a repeat could not return it; nothing was recorded",
			keyName(k), typeName[T](), typeName[T]())).WithCause(err)
	}
	return data, replay, nil
}

// UnmarshalReply decodes data, the reply a fence recorded for k, as T.
// It decodes strictly: JSON that is not one value of T, or that has a
// field T lacks, fails with an error matching message.ErrBadReply that
// names T: the message ran when the reply was recorded, and its reply
// cannot be returned as T (T changed between releases, or another
// handler recorded the reply). Retrying returns the same reply.
func UnmarshalReply[T any](k Key, data []byte) (T, error) {
	v, err := decodeStrict[T](data)
	if err != nil {
		return v, message.ErrBadReply.WithDetails(fmt.Sprintf(
			"fence: %s ran before, and the reply recorded then, %s, does not decode as %s (its type changed between releases, or another handler recorded it)",
			keyName(k), snippet(data), typeName[T]())).WithCause(err)
	}
	return v, nil
}

// decodeStrict decodes data as exactly one T, refusing unknown fields.
func decodeStrict[T any](data []byte) (T, error) {
	var v T
	if len(bytes.TrimSpace(data)) == 0 {
		return v, errors.New("the reply is empty, not JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var zero T
		return zero, err
	}
	if _, err := dec.Token(); err != io.EOF {
		var zero T
		return zero, errors.New("the reply has data after its JSON value")
	}
	return v, nil
}

// keyName names k's message for errors.
func keyName(k Key) string {
	if k.IsZero() {
		return "the transaction"
	}
	return fmt.Sprintf("message %s (%s)", k.ID, k.Type)
}

// typeName returns T's name for errors.
func typeName[T any]() string { return reflect.TypeFor[T]().String() }

// snippet quotes the start of data for an error.
func snippet(data []byte) string {
	const limit = 64
	if len(data) > limit {
		return fmt.Sprintf("%q...", data[:limit])
	}
	return fmt.Sprintf("%q", data)
}
