package message

import (
	"encoding/binary"
	"net/http"

	"github.com/google/uuid"
)

// HTTPStatus returns the HTTP status an API in front of the bus answers
// for an error of code c, so that every HTTP front of a cloudbus cluster
// speaks alike:
//
//	400 bad_request, invalid_uuid      the request is wrong
//	404 not_found
//	409 conflict, already_exists,      the resource's state refuses it
//	    failed_precondition
//	413 too_large
//	503 not_owner, busy, no_route,     nothing ran: retry (send Retry-After)
//	    not_sent, unavailable, closed
//	504 timeout, canceled, node_left   the outcome is unknown
//	502 unknown_message, bad_reply     the nodes disagree on the messages
//	500 internal
//
// A code registered with [RegisterCode] maps by its retry class: never to
// 409 (a service's own refusals are about the resource's state: a volume
// attached elsewhere), safe to 503, unknown and ran to 500. Any other
// code is 500.
func (c Code) HTTPStatus() int {
	switch c {
	case codeBadRequest, codeInvalidUUID:
		return http.StatusBadRequest
	case codeNotFound:
		return http.StatusNotFound
	case codeConflict, codeAlreadyExists, codePrecondition:
		return http.StatusConflict
	case codeTooLarge:
		return http.StatusRequestEntityTooLarge
	case codeNotOwner, codeBusy, codeNoRoute, codeNotSent, codeUnavailable, codeClosed:
		return http.StatusServiceUnavailable
	case codeTimeout, codeCanceled, codeNodeLeft:
		return http.StatusGatewayTimeout
	case codeUnknownMessage, codeBadReply:
		return http.StatusBadGateway
	case codeInternal:
		return http.StatusInternalServerError
	}
	if r, ok := lookupRetry(c); ok {
		switch r {
		case RetryNever:
			return http.StatusConflict
		case RetrySafe:
			return http.StatusServiceUnavailable
		}
	}
	return http.StatusInternalServerError
}

// keySpace is the namespace of [KeyUUID]'s version-5 UUIDs.
var keySpace = uuid.MustParse("6f1c2f4e-8d0a-4c59-9d3e-2b7a1c0e5f48")

// KeyUUID returns the canonical version-5 UUID that key names in
// namespace: the same pair gives the same UUID in every process, and two
// namespaces keep one key's uses apart. Use it to turn a client's
// idempotency key (an HTTP request's Idempotency-Key) into the id of the
// message it sends (bus.WithID), so that a repeated request is the same
// message and runs once, or into the UUID of the resource it creates.
func KeyUUID(namespace, key string) string {
	data := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(namespace)+len(key)), uint64(len(namespace)))
	data = append(append(data, namespace...), key...) // the length first: no two pairs give one string
	return canonicalUUID(uuid.NewSHA1(keySpace, data))
}
