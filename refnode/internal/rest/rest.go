// Package rest serves refnode's REST API: JSON over HTTP for hosts,
// images and VMs. Every request about one resource, and every creation,
// becomes an API message sent through api.portal and routed by the ring,
// as a client that is not a node sends it; lists are read from the
// database. Responses name the node that handled the message and the
// node whose portal forwarded it (headers [HeaderNode], [HeaderPortal]).
//
// # Errors
//
// Every error is a JSON object {"error": {"code", "message", "field",
// "retry"}} with one of these statuses: 400 for a request that is
// malformed or outside the limits (the field named), 401 without the
// token, 404 for an unknown resource or route, 409 for a state that
// refuses the request or a UUID that exists, 413 for a body over the
// limit, 415 for a body that is not JSON, 422 for an Idempotency-Key
// reused for another request, 503 with Retry-After when the resource's
// owner or the database cannot be reached (nothing ran), 504 when the
// outcome is unknown (the deadline passed: repeat the request with the
// same Idempotency-Key to learn it). 500 means the operation failed on
// the server's side (a hypervisor failure), never a request's fault.
//
// # Idempotency
//
// A request with an Idempotency-Key header (1-255 printable ASCII
// bytes) is sent as the message with an id derived from the key: a
// repeated request with the same key runs once and gets the first
// answer; the same key with another request is refused (422). Every
// message is also resent to a new owner when its owner left mid-call,
// which is safe because refnode's services run each message id once.
package rest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// The headers of every response to a request that sent a message.
const (
	// HeaderNode is the UUID of the node whose service handled the
	// message (for a creation: the node whose portal took it).
	HeaderNode = "Refnode-Node"
	// HeaderPortal is the UUID of the node whose api.portal forwarded
	// the message.
	HeaderPortal = "Refnode-Portal"
	// HeaderSource says where a list was read: "database".
	HeaderSource = "Refnode-Source"
	// HeaderIdempotencyKey names a request's idempotency key.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Limits of a request.
const (
	// DefaultMaxBody bounds a request's body: 64 KiB.
	DefaultMaxBody = 64 << 10
	// DefaultTimeout bounds a request's message: 30 s.
	DefaultTimeout = 30 * time.Second
	// MaxKeyBytes bounds an Idempotency-Key.
	MaxKeyBytes = 255
	// DefaultPage and MaxPage bound a list's page (?limit=).
	DefaultPage, MaxPage = 100, 1000
	// retries is how many times a message is resent to a new owner
	// after node_left or not_owner.
	retries = 3
)

// Config configures the API.
type Config struct {
	// Caller sends the API messages through api.portal: a
	// *service.Client. Required.
	Caller service.Caller
	// Store is the record store the lists read. Required.
	Store cloud.Store
	// Token, if not empty, is required as "Authorization: Bearer
	// <Token>" on every request; compared in constant time, never
	// logged.
	Token string
	// Timeout bounds each request's message. Default DefaultTimeout.
	Timeout time.Duration
	// MaxBody bounds a request's body. Default DefaultMaxBody.
	MaxBody int64
	// Logger receives a line per request that failed on the server's
	// side. Default slog.Default().
	Logger *slog.Logger
	// Node, optional, is the node whose view GET /v1/nodes and
	// GET /v1/owner/{uuid} report; without it they answer 404.
	Node Node
	// JobDeadline is how long a job may stay pending before the
	// resource's owner fails it (timeout). Default DefaultJobDeadline.
	JobDeadline time.Duration
	// DeadLetters, optional, is the dead-letter queue GET /v1/dead-letters
	// lists and POST /v1/dead-letters/replay replays: the node (a
	// *service.Node); without it they answer 404.
	DeadLetters DeadLetterQueue
}

// API serves the REST API. Create it with [New].
type API struct {
	cfg   Config
	token [sha256.Size]byte
	mux   *http.ServeMux
}

// New returns the API for cfg.
func New(cfg Config) (*API, error) {
	switch {
	case cfg.Caller == nil:
		return nil, errors.New("rest: Config.Caller is required: a service.Client of the cluster")
	case cfg.Store == nil:
		return nil, errors.New("rest: Config.Store is required: the cluster's record store, for lists")
	case cfg.Timeout < 0 || cfg.MaxBody < 0 || cfg.JobDeadline < 0:
		return nil, errors.New("rest: Config.Timeout, Config.MaxBody and Config.JobDeadline must not be negative (0: the default)")
	}
	if cfg.JobDeadline == 0 {
		cfg.JobDeadline = DefaultJobDeadline
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &API{cfg: cfg, mux: http.NewServeMux()}
	if cfg.Token != "" {
		a.token = sha256.Sum256([]byte(cfg.Token))
	}
	a.routes()
	return a, nil
}

// OpenAPI is the API's OpenAPI 3.1 document, served at
// GET /v1/openapi.json (without the token: it holds no data).
//
//go:embed openapi.json
var OpenAPI []byte

// Server returns an HTTP server of the API whose timeouts bound a slow
// or idle client: 5 s for the headers, 15 s for the whole request, the
// answer within the message's timeout and 10 s more; headers of at most
// 64 KiB.
func (a *API) Server() *http.Server {
	return &http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: a.cfg.Timeout + 10*time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
}

// ServeHTTP serves a request: the token is checked first.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Token != "" && !(r.Method == http.MethodGet && r.URL.Path == "/v1/openapi.json") && !a.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="refnode"`)
		writeError(w, http.StatusUnauthorized, apiError{Code: "unauthorized", Message: "give the API token as the header Authorization: Bearer <token>", Retry: "never"})
		return
	}
	a.mux.ServeHTTP(w, r)
}

// authorized compares the request's bearer token with the configured
// one in constant time (of their hashes: the length does not leak).
func (a *API) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(sum[:], a.token[:]) == 1
}

// idempotencyKey returns the request's Idempotency-Key, "" without one,
// or an error for a malformed key.
func idempotencyKey(r *http.Request) (string, error) {
	keys := r.Header.Values(HeaderIdempotencyKey)
	switch {
	case len(keys) == 0:
		return "", nil
	case len(keys) > 1:
		return "", errors.New("give one Idempotency-Key header")
	}
	k := keys[0]
	if k == "" || len(k) > MaxKeyBytes {
		return "", errors.New("the Idempotency-Key must be 1 to 255 bytes")
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", errors.New("the Idempotency-Key must be printable ASCII without spaces")
		}
	}
	return k, nil
}

// messageID returns the message id the request's Idempotency-Key names
// (message.KeyUUID), "" without one, or an error for a malformed key.
func messageID(r *http.Request) (string, error) {
	k, err := idempotencyKey(r)
	if k == "" || err != nil {
		return "", err
	}
	return message.KeyUUID("refnode.rest.message", k), nil
}

// routed is a reply that says where its message ran.
type routed interface{ Route() api.Handling }

// send sends msg through api.portal and writes the reply, as
// render(reply) with status, or the error. The request's Idempotency-Key
// becomes the message's id.
func send[Resp routed](a *API, w http.ResponseWriter, r *http.Request, msg any, status int, render func(Resp) (any, *apiError)) {
	id, err := messageID(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Code: "bad_request", Message: err.Error(), Field: HeaderIdempotencyKey, Retry: "never"})
		return
	}
	opts := []bus.Option{bus.WithRetry(retries)}
	if id != "" {
		opts = append(opts, bus.WithID(id))
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.Timeout)
	defer cancel()
	reply, err := service.Call[Resp](ctx, a.cfg.Caller, msg, opts...)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away: nobody reads an answer
		}
		a.fail(w, r, err, id != "")
		return
	}
	h := reply.Route()
	w.Header().Set(HeaderNode, h.Node)
	if h.Portal != "" {
		w.Header().Set(HeaderPortal, h.Portal)
	}
	body, refusal := render(reply)
	if refusal != nil {
		writeError(w, http.StatusConflict, *refusal)
		return
	}
	writeJSON(w, status, body)
}
