package message_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/message"
)

// Registered codes are process-wide: each test registers codes of its own
// names, prefixed by the test.

func TestRegisterCode(t *testing.T) {
	s, err := message.RegisterCode("trc_volume_attached", message.RetryNever, "the volume is attached to another VM")
	require.NoError(t, err)
	assert.Equal(t, message.Code("trc_volume_attached"), s.Code)
	assert.Equal(t, "the volume is attached to another VM", s.Description)
	assert.Equal(t, message.RetryNever, s.Retry())
	assert.Equal(t, message.RetryNever, s.Code.Retry(), "the code knows its class in this process")

	err = fmt.Errorf("attach: %w", s.WithDetails("volume v1 is attached to vm x"))
	assert.ErrorIs(t, err, s)
	assert.NotErrorIs(t, err, message.ErrBadRequest)
	assert.Equal(t, message.RetryNever, message.AsError(err).Retry())

	again, err := message.RegisterCode("trc_volume_attached", message.RetryNever, "another text")
	require.NoError(t, err, "the same code and class again is a no-op")
	assert.Same(t, s, again, "it returns the first sentinel")

	_, err = message.RegisterCode("trc_volume_attached", message.RetrySafe, "the volume is attached to another VM")
	require.Error(t, err, "a code has one class")
	assert.Contains(t, err.Error(), `registered with class "never"`)
	assert.Equal(t, message.RetryNever, s.Code.Retry(), "the failed registration changed nothing")

	for _, c := range []message.Code{"trc_unknown", "trc_safe", "trc_ran"} {
		retry := map[message.Code]message.Retry{"trc_unknown": message.RetryUnknown, "trc_safe": message.RetrySafe, "trc_ran": message.RetryRan}[c]
		s := message.MustRegisterCode(c, retry, "x")
		assert.Equal(t, retry, s.Retry(), "%s", c)
	}
}

func TestRegisterCodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		code  message.Code
		retry message.Retry
		desc  string
		want  string
	}{
		{"", message.RetryNever, "x", "not a code"},
		{"Volume_attached", message.RetryNever, "x", "not a code"},
		{"volume-attached", message.RetryNever, "x", "not a code"},
		{"volume attached", message.RetryNever, "x", "not a code"},
		{"_volume", message.RetryNever, "x", "not a code"},
		{"volume_", message.RetryNever, "x", "not a code"},
		{"volume__attached", message.RetryNever, "x", "not a code"},
		{"1volume", message.RetryNever, "x", "not a code"},
		{"volumé", message.RetryNever, "x", "not a code"},
		{message.Code(strings.Repeat("a", 65)), message.RetryNever, "x", "not a code"},
		{"not_found", message.RetryNever, "x", "built-in"},
		{"conflict", message.RetryNever, "x", "built-in"},
		{"trc_refused_class", message.RetryRan + 1, "x", "retry class"},
		{"trc_refused_class", -1, "x", "retry class"},
		{"trc_refused_desc", message.RetryNever, "", "description"},
	} {
		t.Run(string(tc.code), func(t *testing.T) {
			s, err := message.RegisterCode(tc.code, tc.retry, tc.desc)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "message: register code"), err.Error())
		})
	}
	_, err := message.RegisterCode(message.Code(strings.Repeat("a", 64)), message.RetryNever, "x")
	assert.NoError(t, err, "64 bytes is the limit, not beyond it")
	assert.Panics(t, func() { message.MustRegisterCode("Bad", message.RetryNever, "x") })
	for _, c := range message.Codes() {
		_, err := message.RegisterCode(c, c.Retry(), "x")
		assert.Error(t, err, "built-in %s cannot be registered", c)
	}
}

// TestRegisterCodeConcurrent: registrations and lookups from many
// goroutines agree on one sentinel per code (run with -race).
func TestRegisterCodeConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	got := make([]*message.Error, 16)
	for i := range got {
		wg.Go(func() {
			s, err := message.RegisterCode("trc_concurrent", message.RetrySafe, "x")
			assert.NoError(t, err)
			got[i] = s
			assert.Equal(t, message.RetrySafe, message.Code("trc_concurrent").Retry())
			_, err = message.RegisterCode(message.Code(fmt.Sprintf("trc_concurrent_%d", i)), message.RetryNever, "x")
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	for _, s := range got {
		assert.Same(t, got[0], s)
	}
}

// TestRetryClassOnTheWire: the error object carries its class; a
// receiver uses it for a code it does not know, and its own table for
// one it knows.
func TestRetryClassOnTheWire(t *testing.T) {
	decode := func(t *testing.T, s string) *message.Error {
		t.Helper()
		var e message.Error
		require.NoError(t, json.Unmarshal([]byte(s), &e))
		return &e
	}

	t.Run("every code is sent with its class", func(t *testing.T) {
		for _, c := range message.Codes() {
			data, err := json.Marshal(message.NewError(c, "d"))
			require.NoError(t, err)
			var obj map[string]any
			require.NoError(t, json.Unmarshal(data, &obj))
			assert.Equal(t, map[message.Retry]string{message.RetrySafe: "safe", message.RetryNever: "never", message.RetryUnknown: "unknown", message.RetryRan: "ran"}[c.Retry()],
				obj["retry"], "%s", c)
		}
	})

	t.Run("a code this node does not know takes the wire's class", func(t *testing.T) {
		for name, want := range map[string]message.Retry{"safe": message.RetrySafe, "never": message.RetryNever, "unknown": message.RetryUnknown, "ran": message.RetryRan} {
			e := decode(t, `{"code":"trw_not_registered_here","retry":"`+name+`"}`)
			assert.Equal(t, want, e.Retry(), name)
			assert.Equal(t, message.RetryUnknown, e.Code.Retry(), "the code alone knows nothing in this process")
		}
	})

	t.Run("an older peer, or a class added later, reads as unknown", func(t *testing.T) {
		assert.Equal(t, message.RetryUnknown, decode(t, `{"code":"trw_old_peer"}`).Retry())
		assert.Equal(t, message.RetryUnknown, decode(t, `{"code":"trw_newer","retry":"partial"}`).Retry())
		var e message.Error
		assert.Error(t, json.Unmarshal([]byte(`{"code":"trw_newer","retry":7}`), &e), "a class is a string, as a code is")
	})

	t.Run("a peer cannot change a known code's class", func(t *testing.T) {
		assert.Equal(t, message.RetryNever, decode(t, `{"code":"not_found","retry":"safe"}`).Retry())
		assert.Equal(t, message.RetryUnknown, decode(t, `{"code":"timeout","retry":"never"}`).Retry())
		message.MustRegisterCode("trw_registered", message.RetryNever, "x")
		assert.Equal(t, message.RetryNever, decode(t, `{"code":"trw_registered","retry":"safe"}`).Retry())
	})

	t.Run("the class travels on", func(t *testing.T) {
		// A node that did not register the code passes the error on (the
		// API portal does): the next reader still learns its class.
		received := decode(t, `{"code":"trw_relayed","retry":"never","description":"the volume is attached to another VM"}`)
		wrapped := fmt.Errorf("portal: %w", received.WithDetails("volume v1"))
		for _, e := range []*message.Error{received, received.WithDetails("x"), received.WithCause(errors.New("c")), message.AsError(wrapped)} {
			assert.Equal(t, message.RetryNever, e.Retry())
			data, err := json.Marshal(e)
			require.NoError(t, err)
			assert.Contains(t, string(data), `"retry":"never"`)
			assert.Equal(t, message.RetryNever, decode(t, string(data)).Retry(), "%s", data)
		}
		// As a cause, too.
		data, err := json.Marshal(message.ErrInternal.WithCause(fmt.Errorf("x: %w", received)))
		require.NoError(t, err)
		cause, ok := decode(t, string(data)).Cause.(*message.Error)
		require.True(t, ok)
		assert.Equal(t, message.RetryNever, cause.Retry(), "%s", data)
	})

	t.Run("a plain cause has no class", func(t *testing.T) {
		data, err := json.Marshal(message.ErrInternal.WithCause(errors.New("plain")))
		require.NoError(t, err)
		assert.Equal(t, `{"code":"internal","retry":"unknown","description":"internal error","cause":{"code":"","description":"plain"}}`, string(data))
	})
}
