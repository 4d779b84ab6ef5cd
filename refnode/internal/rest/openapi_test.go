package rest_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/refnode/internal/rest"
)

// loadOpenAPI loads and validates the API's document.
func loadOpenAPI(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(rest.OpenAPI)
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater(), "OpenAPI 3.1")
	require.NoError(t, doc.Validate(context.Background()))
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	return doc, router
}

// TestOpenAPIDrift: the document is valid OpenAPI 3.1, every route the
// API serves is documented and every documented operation is served.
func TestOpenAPIDrift(t *testing.T) {
	doc, _ := loadOpenAPI(t)
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	served := slices.Clone(rest.Routes)
	slices.Sort(documented)
	slices.Sort(served)
	assert.Equal(t, served, documented, "rest.Routes and openapi.json")

	f := start(t, 1, "tok")
	got := f.do(t, "GET", "/v1/openapi.json", "")
	assert.Equal(t, http.StatusOK, got.status, "served without the token")
	assert.Equal(t, "3.1.0", got.str("openapi"))
}

// validate checks a request and its answer against the document: the
// request only if it is meant to be valid, the answer always (its
// status documented, its body of the documented schema).
func validate(t *testing.T, router routers.Router, req *http.Request, body string, validRequest bool, status int, header http.Header, resp []byte) {
	t.Helper()
	req = req.Clone(context.Background())
	req.Body = io.NopCloser(strings.NewReader(body))
	route, params, err := router.FindRoute(req)
	if err != nil {
		assert.False(t, validRequest, "%s %s is documented: %v", req.Method, req.URL, err)
		return
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if validRequest {
		assert.NoError(t, openapi3filter.ValidateRequest(context.Background(), in), "request %s %s %s", req.Method, req.URL, body)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: opts}
	out.SetBodyBytes(bytes.Clone(resp))
	assert.NoError(t, openapi3filter.ValidateResponse(context.Background(), out), "answer %d to %s %s: %s", status, req.Method, req.URL, resp)
}
