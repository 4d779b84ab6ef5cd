package message_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cloudbus-go/cloudbus/message"
)

// TestHTTPStatus: every built-in code has its documented status; a
// registered code maps by its retry class; an unknown code is 500.
func TestHTTPStatus(t *testing.T) {
	want := map[message.Code]int{
		"bad_request": 400, "invalid_uuid": 400, "not_found": 404, "conflict": 409, "already_exists": 409,
		"failed_precondition": 409, "too_large": 413, "not_owner": 503, "busy": 503, "no_route": 503,
		"not_sent": 503, "unavailable": 503, "closed": 503, "timeout": 504, "canceled": 504, "node_left": 504,
		"unknown_message": 502, "bad_reply": 502, "internal": 500,
	}
	for _, c := range message.Codes() {
		s, ok := want[c]
		if assert.True(t, ok, "code %s has a status in the test", c) {
			assert.Equal(t, s, c.HTTPStatus(), "code %s", c)
		}
	}
	never, err := message.RegisterCode("http_test_attached", message.RetryNever, "attached elsewhere")
	assert.NoError(t, err)
	safe, err := message.RegisterCode("http_test_later", message.RetrySafe, "try later")
	assert.NoError(t, err)
	assert.Equal(t, http.StatusConflict, never.Code.HTTPStatus())
	assert.Equal(t, http.StatusServiceUnavailable, safe.Code.HTTPStatus())
	assert.Equal(t, http.StatusInternalServerError, message.Code("never_heard_of").HTTPStatus())
}

// TestKeyUUID: one key names one canonical UUID per namespace.
func TestKeyUUID(t *testing.T) {
	a := message.KeyUUID("orders", "k-1")
	assert.True(t, message.IsCanonicalUUID(a), a)
	assert.Equal(t, a, message.KeyUUID("orders", "k-1"))
	assert.NotEqual(t, a, message.KeyUUID("orders", "k-2"))
	assert.NotEqual(t, a, message.KeyUUID("invoices", "k-1"))
	assert.NotEqual(t, message.KeyUUID("a\x00b", "c"), message.KeyUUID("a", "b\x00c"), "a namespace with the separator")
	assert.Equal(t, byte('5'), a[12], "version 5")
}

// A client's idempotency key names the message id of the request it
// sends, so that the request repeated after a timeout runs once.
func ExampleKeyUUID() {
	id := message.KeyUUID("refnode.rest.message", "create-vm-7f3a")
	fmt.Println(id == message.KeyUUID("refnode.rest.message", "create-vm-7f3a"), len(id))
	// Output: true 32
}
