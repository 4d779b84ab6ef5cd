package rest_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/message"
)

// TestDeleteImage: DELETE /v1/images/{uuid} is refused while a VM that is
// not destroyed uses the image, then deletes it, on its owner; a second
// delete, a read and a create from it are not found.
func TestDeleteImage(t *testing.T) {
	f := start(t, 3, "")
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/hosts", `{}`).status)
	img := f.do(t, "POST", "/v1/images", `{"name":"old"}`).str("uuid")
	vm := f.do(t, "POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img))
	require.Equal(t, http.StatusCreated, vm.status, vm.raw)

	used := f.do(t, "DELETE", "/v1/images/"+img, "")
	assert.Equal(t, http.StatusConflict, used.status, used.raw)
	assert.Equal(t, "conflict", used.errField("code"))
	assert.Contains(t, used.errField("message"), vm.str("uuid"), "names a VM that uses it")
	require.Equal(t, http.StatusOK, f.do(t, "POST", "/v1/vms/"+vm.str("uuid")+"/destroy", "").status)

	deleted := f.do(t, "DELETE", "/v1/images/"+img, "", "Idempotency-Key", "delete-old-image")
	require.Equal(t, http.StatusOK, deleted.status, deleted.raw)
	assert.Equal(t, img, deleted.str("uuid"))
	assert.Equal(t, "old", deleted.str("name"))
	assert.Equal(t, f.c.Owner(img), deleted.header.Get("Refnode-Node"), "the image's owner deleted it")
	again := f.do(t, "DELETE", "/v1/images/"+img, "", "Idempotency-Key", "delete-old-image")
	assert.Equal(t, http.StatusOK, again.status, "the same request again gets the first answer: %s", again.raw)

	f.badRequests = true
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"DELETE", "/v1/images/" + img, "", http.StatusNotFound},
		{"GET", "/v1/images/" + img, "", http.StatusNotFound},
		{"POST", "/v1/vms", fmt.Sprintf(`{"image_uuid":%q}`, img), http.StatusNotFound},
		{"DELETE", "/v1/images/" + message.NewUUID(), "", http.StatusNotFound},
		{"DELETE", "/v1/images/nope", "", http.StatusBadRequest},
	} {
		got := f.do(t, c.method, c.path, c.body)
		assert.Equal(t, c.status, got.status, "%s %s: %s", c.method, c.path, got.raw)
	}
	f.badRequests = false
	list := f.do(t, "GET", "/v1/images", "")
	assert.Equal(t, []any{}, list.body["items"], "listed no more")
}
