package message_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sentinels() map[message.Code]*message.Error {
	return map[message.Code]*message.Error{
		message.ErrTimeout.Code:        message.ErrTimeout,
		message.ErrCanceled.Code:       message.ErrCanceled,
		message.ErrNoRoute.Code:        message.ErrNoRoute,
		message.ErrUnknownMessage.Code: message.ErrUnknownMessage,
		message.ErrBadReply.Code:       message.ErrBadReply,
		message.ErrNodeLeft.Code:       message.ErrNodeLeft,
		message.ErrNotOwner.Code:       message.ErrNotOwner,
		message.ErrBusy.Code:           message.ErrBusy,
		message.ErrBadRequest.Code:     message.ErrBadRequest,
		message.ErrInvalidUUID.Code:    message.ErrInvalidUUID,
		message.ErrNotFound.Code:       message.ErrNotFound,
		message.ErrTooLarge.Code:       message.ErrTooLarge,
		message.ErrInternal.Code:       message.ErrInternal,
		message.ErrClosed.Code:         message.ErrClosed,
		message.ErrUnavailable.Code:    message.ErrUnavailable,
		message.ErrNotSent.Code:        message.ErrNotSent,

		message.ErrConflict.Code:           message.ErrConflict,
		message.ErrFailedPrecondition.Code: message.ErrFailedPrecondition,
		message.ErrAlreadyExists.Code:      message.ErrAlreadyExists,
	}
}

func TestEveryCodeHasASentinelAndARetryRule(t *testing.T) {
	s := sentinels()
	require.Len(t, message.Codes(), len(s), "one sentinel per code in the table")
	for _, c := range message.Codes() {
		e, ok := s[c]
		require.True(t, ok, "code %s has no sentinel", c)
		assert.Equal(t, c, e.Code)
		assert.NotContains(t, e.Retry().String(), "Retry(", "code %s has no retry rule", c)
	}
	assert.Equal(t, message.RetrySafe, message.ErrNoRoute.Code.Retry())
	assert.Equal(t, message.RetrySafe, message.ErrNotSent.Code.Retry(), "a message refused before sending did not run")
	assert.Equal(t, message.RetrySafe, message.ErrBusy.Code.Retry())
	assert.Equal(t, message.RetrySafe, message.ErrNotOwner.Code.Retry())
	assert.Equal(t, message.RetryUnknown, message.ErrNodeLeft.Code.Retry())
	assert.Equal(t, message.RetryUnknown, message.ErrTimeout.Code.Retry())
	assert.Equal(t, message.RetryNever, message.ErrBadRequest.Code.Retry())
	assert.Equal(t, message.RetryNever, message.ErrUnknownMessage.Code.Retry(), "unknown_message: nothing ran")
	assert.Equal(t, message.RetryRan, message.ErrBadReply.Code.Retry(), "bad_reply: the handler ran")
	assert.Equal(t, message.RetryNever, message.ErrConflict.Code.Retry(), "conflict: nothing ran, the state refuses it")
	assert.Equal(t, message.RetryNever, message.ErrFailedPrecondition.Code.Retry(), "failed_precondition: nothing ran")
	assert.Equal(t, message.RetryNever, message.ErrAlreadyExists.Code.Retry(), "already_exists: nothing ran")
	assert.Equal(t, message.RetryUnknown, message.Code("from_a_newer_node").Retry())
	assert.Equal(t, "Retry(42)", message.Retry(42).String())
	assert.Equal(t, "Retry(-1)", message.Retry(-1).String())
}

func TestRetryClasses(t *testing.T) {
	// The values are stable (new classes are added after the old ones), and
	// each has its own name.
	classes := []struct {
		r    message.Retry
		want int
	}{
		{message.RetryUnknown, 0},
		{message.RetrySafe, 1},
		{message.RetryNever, 2},
		{message.RetryRan, 3},
	}
	names := map[string]bool{}
	for _, c := range classes {
		assert.Equal(t, c.want, int(c.r), "value of %s", c.r)
		assert.NotContains(t, c.r.String(), "Retry(")
		names[c.r.String()] = true
	}
	assert.Len(t, names, len(classes), "every class has a distinct name")
	assert.Equal(t, "the operation ran: do not retry unless repeating it is intended", message.RetryRan.String())
	assert.Equal(t, "Retry(4)", (message.RetryRan + 1).String(), "the first value past the last class is unknown")

	// Every class is used by some code.
	used := map[message.Retry]bool{}
	for _, code := range message.Codes() {
		used[code.Retry()] = true
	}
	for _, c := range classes {
		assert.True(t, used[c.r], "no code has retry class %s", c.r)
	}
}

func TestBadReplyCrossesTheWire(t *testing.T) {
	sent := fmt.Errorf("bus: call test.v1.StartVm on vm.x: %w",
		message.ErrBadReply.WithDetails("the handler ran and replied test.v1.StopVm, not the requested test.startVM"))
	data, err := json.Marshal(message.AsError(sent))
	require.NoError(t, err)
	var got message.Error
	require.NoError(t, json.Unmarshal(data, &got))
	assert.ErrorIs(t, &got, message.ErrBadReply)
	assert.NotErrorIs(t, &got, message.ErrUnknownMessage, "bad_reply is not unknown_message: the handler ran")
	assert.Equal(t, message.RetryRan, got.Retry())
	assert.Equal(t, message.ErrBadReply.Code, message.CodeOf(sent))
}

func TestErrorRoundTripKeepsCode(t *testing.T) {
	for code, sentinel := range sentinels() {
		t.Run(string(code), func(t *testing.T) {
			local := sentinel.WithDetails("vm 932763162d054c04adaab6ab498c9139").
				WithCause(fmt.Errorf("hypervisor: %w", io.ErrUnexpectedEOF))
			data, err := json.Marshal(local)
			require.NoError(t, err)

			var remote message.Error
			require.NoError(t, json.Unmarshal(data, &remote))
			var asErr error = &remote
			assert.ErrorIs(t, asErr, sentinel, "decoded error must match its sentinel")
			for other, s := range sentinels() {
				if other != code {
					assert.NotErrorIs(t, asErr, s)
				}
			}
			assert.Equal(t, local.Error(), remote.Error(), "text survives the wire")
			cause, ok := remote.Unwrap().(*message.Error)
			require.True(t, ok)
			assert.Equal(t, message.Code(""), cause.Code, "a plain Go cause gains no code")
		})
	}
}

func TestErrorWrappedStillMatches(t *testing.T) {
	err := fmt.Errorf("bus: call refnode.v1.StartVm: %w", message.ErrNotFound.WithDetails("vm x"))
	assert.ErrorIs(t, err, message.ErrNotFound)
	wire := message.AsError(err)
	assert.Equal(t, message.ErrNotFound.Code, wire.Code)
	assert.Equal(t, "not found", wire.Description, "the wrapped error's own fields, not a Go string of the chain")
	assert.Equal(t, "bus: call refnode.v1.StartVm: vm x", wire.Details, "the wrapping text, then the details")

	// Without details, the wrapping text is the details.
	wire = message.AsError(fmt.Errorf("read vm: %w", message.ErrNotFound))
	assert.Equal(t, message.ErrNotFound.Description, wire.Description)
	assert.Equal(t, "read vm", wire.Details)

	// Joined errors (Envelope.Validate): the first one's code, every
	// one's details.
	joined := fmt.Errorf("decode: %w", errors.Join(message.ErrBadRequest.WithDetails("id too long"),
		message.ErrInvalidUUID.WithDetails("resource xyz"), message.ErrBadRequest.WithDetails("id too long")))
	wire = message.AsError(joined)
	assert.Equal(t, message.ErrBadRequest.Code, wire.Code)
	assert.Equal(t, "bad request", wire.Description)
	assert.Equal(t, "id too long; resource xyz", wire.Details)

	// The cause of the wrapped error travels too.
	wire = message.AsError(fmt.Errorf("x: %w", message.ErrInternal.WithCause(io.EOF)))
	assert.ErrorIs(t, wire, io.EOF)
}

func TestErrorContextInterop(t *testing.T) {
	assert.ErrorIs(t, message.ErrTimeout, context.DeadlineExceeded)
	assert.ErrorIs(t, message.ErrCanceled, context.Canceled)
	assert.NotErrorIs(t, message.ErrNodeLeft, context.DeadlineExceeded)
	assert.Equal(t, message.ErrTimeout.Code, message.CodeOf(fmt.Errorf("x: %w", context.DeadlineExceeded)))
	assert.Equal(t, message.ErrCanceled.Code, message.CodeOf(context.Canceled))
	assert.Equal(t, message.ErrInternal.Code, message.CodeOf(io.EOF))
	assert.Equal(t, message.Code(""), message.CodeOf(nil))
	assert.Nil(t, message.AsError(nil))
}

func TestErrorfWrapsCause(t *testing.T) {
	e := message.Errorf(message.ErrInternal.Code, "start vm %s: %w", "x", io.EOF)
	assert.ErrorIs(t, e, io.EOF)
	assert.ErrorIs(t, e, message.ErrInternal)
	assert.Equal(t, "internal: start vm x: EOF: EOF", e.Error())
	e2 := message.Errorf(message.ErrBusy.Code, "queue %d full", 3)
	assert.Nil(t, e2.Cause)
	assert.Equal(t, "busy: queue 3 full", e2.Error())
}

func TestErrorDecodeHostile(t *testing.T) {
	// No code becomes internal; a deep chain is cut.
	var e message.Error
	require.NoError(t, json.Unmarshal([]byte(`{"description":"x"}`), &e))
	assert.Equal(t, message.ErrInternal.Code, e.Code)

	deep := `{"code":"busy"}`
	for range 50 {
		deep = `{"code":"internal","cause":` + deep + `}`
	}
	require.NoError(t, json.Unmarshal([]byte(deep), &e))
	depth := 0
	for c := error(&e); c != nil; c = errors.Unwrap(c) {
		depth++
	}
	assert.LessOrEqual(t, depth, 9)
}

func TestErrorMarshalCyclicCauseIsBounded(t *testing.T) {
	e := &message.Error{Code: message.ErrInternal.Code, Description: "loop"}
	e.Cause = e
	data, err := json.Marshal(e)
	require.NoError(t, err)
	assert.Less(t, len(data), 1000)
}
