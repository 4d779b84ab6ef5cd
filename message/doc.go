// Package message defines what travels on the cloud bus: the [Envelope]
// every transport carries, the [Registry] of typed payloads, the coded
// [Error] that replies carry across nodes, canonical resource UUIDs, the
// [Routed] payloads that name one, and the lifecycle events
// ([NodeJoined], [NodeLeft]).
//
// # Envelopes
//
// An envelope holds routing fields (target service id, optional resource
// UUID, correlation id and reply-to), the sender's deadline, headers that
// pass through untouched, and a JSON body.
//
// The deadline travels twice. Deadline is absolute, in cluster time: the
// clock of the heartbeat store, which every node measures its offset to
// at each beat and every client to through a node, so that a message
// that waited anywhere (a broker queue, a consumer's prefetch buffer, the
// socket of a paused process) is known to be late when it is finally
// read. An earlier version carried only a duration, so that clock skew
// could neither expire nor extend it; but a duration restarts wherever
// the message is next read, and a message that waited ten seconds in a
// paused node ran with a full new deadline. Cluster time keeps the skew
// argument (node clocks may be minutes apart; what matters is each
// node's measured offset to one clock, whose error bound every node
// logs) and adds the wait. Timeout, the time left when the message was
// sent, stays for receivers that have no cluster time. [EncodeEnvelope] and [DecodeEnvelope] enforce a size
// limit, valid UTF-8 and a single JSON value with no trailing data.
// Envelopes are encoded with encoding/json and decoded by a hand-written
// decoder, 3 to 4 times faster, that a differential fuzz test keeps in
// agreement with encoding/json (repeated keys and null included).
//
// # Typed payloads
//
// Payload types are registered under stable, versioned names such as
// "refnode.v1.StartVm" (see [ValidTypeName]). Decoding looks the name up
// first and only ever instantiates a registered type: an envelope naming
// anything else, even the name of a real Go type, fails with
// [ErrUnknownMessage]. Never rename a registered type; register a new
// version instead. There is no global registry: create one with
// [NewRegistry] and hand it to the bus.
//
// # Errors that survive the wire
//
// Every failure a caller may see has a [Code] from one table (see the Code
// constants and [Codes]). Each code belongs to one retry class, reported
// by [Code.Retry], which says what is known of whether the operation
// happened:
//
//   - [RetrySafe]: it did not happen and a retry may succeed (no_route,
//     not_owner, busy).
//   - [RetryNever]: it did not happen and a retry fails the same way
//     (unknown_message, bad_request, invalid_uuid, not_found, too_large).
//   - [RetryUnknown]: it may have happened (timeout, canceled, node_left,
//     internal, closed, unavailable, and any code from a newer node).
//     Retry only idempotent operations.
//   - [RetryRan]: it happened (bad_reply: the handler ran, but its reply
//     could not be read as the type the caller asked for). Retrying runs
//     it again; do so only if that is intended.
//
// An [Error] marshals
// its code, description, details and cause chain to JSON; its Is method
// compares codes, so after decoding on another node
//
//	errors.Is(err, message.ErrNotFound)
//
// still holds. [AsError] converts any Go error for the wire, keeping the
// code of a wrapped *Error.
//
// # Resource UUIDs
//
// The ring hashes resource UUIDs as strings, so one UUID must have one
// spelling. [NormalizeUUID] maps the dashed and undashed forms, in any
// case, to 32 lower-case hex digits and rejects anything else with
// [ErrInvalidUUID]; [NewUUID] makes random (version 4) ones. Both use
// github.com/google/uuid.
//
// # Routing by resource
//
// A payload type about one existing resource (StartVm, GetHost, ...)
// implements [Routed]: its ResourceUUID method names the resource. The bus
// routes such a message to the resource's owner, sets the envelope's
// resource_uuid from it, and refuses with [ErrBadRequest] an envelope
// carrying it that names no resource or a different one. [ResourceOf]
// finds the method on a value or a pointer and returns the canonical UUID.
// Creation messages and messages about no resource do not implement it.
//
// # Wire format and versions
//
// The wire format is specified for clients in any language in
// docs/wire.md at the root of the repository ([wire protocol]): the
// RabbitMQ queues and exchanges, the envelope's JSON fields and limits,
// deadlines and cluster time, replies, every error code with its retry
// class, and refnode's messages with worked examples. Tests in refnode
// (TestWireDoc, TestWireDocExamples) fail when it and the code disagree.
//
// Every envelope carries the version of the protocol its sender speaks
// ([Envelope].Protocol, JSON "protocol"); absent or 0 means 1.
// [EncodeEnvelope] writes [ProtocolVersion], 1 in this release. A
// receiver refuses an envelope of a higher version than it speaks:
// a request is answered with
// [ErrBadRequest] naming both versions, a send or an event is dropped
// unrun. The protocol changes by these rules:
//
//  1. Adding an optional field whose absence keeps today's meaning, to
//     the envelope or to a payload, needs no new version: receivers
//     ignore unknown fields.
//  2. New error codes need no new version: an older node reports a code
//     it does not know as [RetryUnknown].
//  3. A changed payload is registered under a new type name
//     ("refnode.v2.StartVm"), never given a new meaning under an old one.
//  4. Anything an older receiver would misread (a changed meaning, a
//     renamed or removed field, a new required field) bumps the protocol
//     version, and the upgrade takes two rolling steps: first deploy
//     nodes that read both versions and still write the old one, then let
//     them write the new one.
//
// Golden files in testdata/golden pin the encoding of the current
// version: a change that alters them is a change of the wire format.
//
// [wire protocol]: https://github.com/cloudbus-go/cloudbus/blob/main/docs/wire.md
package message
