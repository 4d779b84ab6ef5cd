package rest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// DefaultDeadLetters is how many dead letters GET /v1/dead-letters
// returns without ?limit=.
const DefaultDeadLetters = 100

// DeadLetterQueue reads and replays the cluster's dead-letter queue: a
// *service.Node.
type DeadLetterQueue interface {
	// DeadLetters returns the first max messages of the queue, leaving
	// them there.
	DeadLetters(ctx context.Context, max int) ([]bus.DeadLetter, error)
	// ReplayDeadLetters sends the messages with these ids again, each to
	// its resource's owner now, and removes them.
	ReplayDeadLetters(ctx context.Context, ids ...string) (bus.ReplayResult, error)
}

var _ DeadLetterQueue = (*service.Node)(nil)

// deadLetterList is the body of GET /v1/dead-letters.
type deadLetterList struct {
	Items []bus.DeadLetter `json:"items"`
	// Source says where the list was read: the dead-letter queue, on the
	// broker, left as it was.
	Source string `json:"source"`
}

// replayBody is the body of POST /v1/dead-letters/replay.
type replayBody struct {
	// IDs are the ids of the messages to send again. Required.
	IDs []string `json:"ids"`
}

// noDeadLetters answers the dead-letter routes on an API without a
// queue to read.
func noDeadLetters(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, apiError{Code: string(message.ErrNotFound.Code), Retry: "never",
		Message: "this API serves no dead-letter queue (Config.DeadLetters is not set)"})
}

// listDeadLetters serves GET /v1/dead-letters[?limit=]: the head of the
// dead-letter queue, oldest first, read from the broker and left there.
func (a *API) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	if a.cfg.DeadLetters == nil {
		noDeadLetters(w)
		return
	}
	limit := DefaultDeadLetters
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > bus.MaxDeadLetters {
			badRequest(w, "limit", "limit must be a number from 1 to %d", bus.MaxDeadLetters)
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.Timeout)
	defer cancel()
	dls, err := a.cfg.DeadLetters.DeadLetters(ctx, limit)
	if err != nil {
		if r.Context().Err() == nil {
			a.fail(w, r, fmt.Errorf("read the dead-letter queue: %w", err), false)
		}
		return
	}
	if dls == nil {
		dls = []bus.DeadLetter{}
	}
	w.Header().Set(HeaderSource, "dead-letter-queue")
	writeJSON(w, http.StatusOK, deadLetterList{Items: dls, Source: "dead-letter-queue"})
}

// replayDeadLetters serves POST /v1/dead-letters/replay: the messages
// named are sent again, each to its resource's owner now, and leave the
// queue. 200 lists what was replayed and what was not found; 404 if none
// was found.
func (a *API) replayDeadLetters(w http.ResponseWriter, r *http.Request) {
	if a.cfg.DeadLetters == nil {
		noDeadLetters(w)
		return
	}
	var b replayBody
	if !a.decode(w, r, &b, false) {
		return
	}
	if len(b.IDs) == 0 {
		badRequest(w, "ids", "ids is required: the ids of the messages to replay (GET /v1/dead-letters lists them)")
		return
	}
	if len(b.IDs) > bus.MaxDeadLetters {
		badRequest(w, "ids", "at most %d ids at a time", bus.MaxDeadLetters)
		return
	}
	for i, id := range b.IDs {
		if _, err := message.NormalizeUUID(id); err != nil {
			writeError(w, http.StatusBadRequest, apiError{Code: string(message.ErrInvalidUUID.Code), Message: fmt.Sprintf("ids[%d]: %v", i, err), Field: "ids", Retry: "never"})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.Timeout)
	defer cancel()
	res, err := a.cfg.DeadLetters.ReplayDeadLetters(ctx, b.IDs...)
	switch {
	case err != nil && len(res.Replayed) > 0:
		// Some went: say which, and why the rest did not.
		a.cfg.Logger.Warn("REST dead-letter replay stopped", "replayed", len(res.Replayed), "err", err)
		writeJSON(w, http.StatusOK, replayAnswer{ReplayResult: res, Error: err.Error()})
	case err != nil:
		if r.Context().Err() == nil {
			a.fail(w, r, fmt.Errorf("replay dead letters: %w", err), false)
		}
	case len(res.Replayed) == 0:
		writeError(w, http.StatusNotFound, apiError{Code: string(message.ErrNotFound.Code), Retry: "never",
			Message: fmt.Sprintf("none of the %d ids is in the dead-letter queue (already replayed, or never dead-lettered)", len(res.Missing))})
	default:
		writeJSON(w, http.StatusOK, replayAnswer{ReplayResult: res})
	}
}

// replayAnswer is the body of a 200 to POST /v1/dead-letters/replay.
type replayAnswer struct {
	bus.ReplayResult
	// Error says why the replay stopped before the end, if it did: the
	// ids neither replayed nor missing are still in the queue.
	Error string `json:"error,omitempty"`
}
