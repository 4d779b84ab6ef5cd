package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
)

// apiError is the body of every error response, under "error".
type apiError struct {
	// Code is the cloudbus error code (message.Code) or one of the API's
	// own: unauthorized, not_json, idempotency_key_reused.
	Code string `json:"code"`
	// Message says what failed and what to do.
	Message string `json:"message"`
	// Field names the request's field at fault, if one is.
	Field string `json:"field,omitempty"`
	// Retry says whether the operation ran: "safe" (it did not; retry),
	// "never" (it did not; a retry fails the same way), "unknown" (it
	// may have; repeat with the same Idempotency-Key), "ran".
	Retry string `json:"retry"`
}

// retryName is the wire name of a retry class (docs/wire.md).
func retryName(r message.Retry) string {
	switch r {
	case message.RetrySafe:
		return "safe"
	case message.RetryNever:
		return "never"
	case message.RetryRan:
		return "ran"
	default:
		return "unknown"
	}
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	data, err := json.Marshal(body)
	if err != nil { // records and errors always encode; say so if not
		status, data = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encode the response","retry":"ran"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, struct {
		Error apiError `json:"error"`
	}{e})
}

// fail writes the error of a message sent for r.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error, keyed bool) {
	e := message.AsError(err)
	status := e.Code.HTTPStatus()
	text := e.Details // what the handler said, without the bus's context
	if text == "" {
		text = err.Error()
	}
	if d := e.Description; e.Code == message.ErrInternal.Code && d != message.ErrInternal.Description && !strings.Contains(text, d) {
		// A handler's uncoded error crosses the bus as an internal
		// error whose description is its text (message.AsError), and
		// Details above holds only where the call went: say why.
		text += ": " + d
	}
	out := apiError{Code: string(e.Code), Message: text, Retry: retryName(e.Retry())}
	var inv *api.InvalidError
	if errors.As(err, &inv) && len(inv.Fields) > 0 {
		out.Field = inv.Fields[0].Field
	}
	switch {
	case keyed && e.Code == message.ErrBadRequest.Code && strings.Contains(err.Error(), "message id") && strings.Contains(err.Error(), "was first used for"):
		status = http.StatusUnprocessableEntity
		out.Code = "idempotency_key_reused"
		out.Message = "this Idempotency-Key was used for another request; give every request its own key (" + text + ")"
	case status == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
		out.Message += "; nothing ran: retry"
	case status == http.StatusGatewayTimeout && keyed:
		out.Message += "; the outcome is unknown: repeat the request with the same Idempotency-Key to learn it"
	case status == http.StatusGatewayTimeout:
		out.Message += "; the outcome is unknown: read the resource to learn it (send an Idempotency-Key to repeat a request safely)"
	}
	if status >= 500 {
		a.cfg.Logger.Warn("REST request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeError(w, status, out)
}

// badRequest writes a 400 naming field.
func badRequest(w http.ResponseWriter, field, format string, args ...any) {
	writeError(w, http.StatusBadRequest, apiError{Code: string(message.ErrBadRequest.Code), Message: fmt.Sprintf(format, args...), Field: field, Retry: "never"})
}

// pathUUID returns the request's {uuid}, canonical, or writes a 400.
func pathUUID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, err := message.NormalizeUUID(r.PathValue("uuid"))
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Code: string(message.ErrInvalidUUID.Code), Message: err.Error(), Field: "uuid", Retry: "never"})
		return "", false
	}
	return id, true
}

// decode reads r's body as JSON into v, strictly: one object, no
// unknown fields, at most MaxBody bytes. An empty body is allowed only
// if empty is. It writes the error and returns false on failure. The
// Content-Type may be absent, JSON, or application/x-www-form-urlencoded,
// which curl -d sends unless told otherwise: the body is read as JSON.
func (a *API) decode(w http.ResponseWriter, r *http.Request, v any, empty bool) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json") && mt != "application/x-www-form-urlencoded") {
			writeError(w, http.StatusUnsupportedMediaType, apiError{Code: "not_json", Message: fmt.Sprintf("the body's Content-Type is %q; send application/json", ct), Retry: "never"})
			return false
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, a.cfg.MaxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.More() || dec.Decode(new(json.RawMessage)) != io.EOF {
			badRequest(w, "", "the body holds more than one JSON value; send one object")
			return false
		}
		return true
	}
	var (
		syn  *json.SyntaxError
		typ  *json.UnmarshalTypeError
		size *http.MaxBytesError
	)
	switch {
	case errors.Is(err, io.EOF) && empty:
		return true
	case errors.Is(err, io.EOF):
		badRequest(w, "", "the body is empty; send a JSON object")
	case errors.As(err, &size):
		writeError(w, http.StatusRequestEntityTooLarge, apiError{Code: string(message.ErrTooLarge.Code), Message: fmt.Sprintf("the body is more than %d bytes", size.Limit), Retry: "never"})
	case errors.As(err, &syn):
		badRequest(w, "", "the body is not valid JSON (at byte %d): %v", syn.Offset, syn)
	case errors.Is(err, io.ErrUnexpectedEOF):
		badRequest(w, "", "the body ends in the middle of a JSON value")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			badRequest(w, "", "the body must be a JSON object, not %s", typ.Value)
		} else {
			badRequest(w, field, "%s must be %s, not %s", field, jsonKind(typ.Type.Kind().String()), typ.Value)
		}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		badRequest(w, field, "unknown field %q", field)
	default:
		badRequest(w, "", "read the body: %v", err)
	}
	return false
}

// jsonKind names a Go kind as JSON does.
func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"), strings.HasPrefix(k, "float"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "true or false"
	case k == "slice", k == "array":
		return "an array"
	default:
		return "an object"
	}
}
