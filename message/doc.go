// Package message defines what travels on the cloud bus: the [Envelope]
// every transport carries, the [Registry] of typed payloads, the coded
// [Error] that replies carry across nodes, canonical resource UUIDs and
// the lifecycle events ([NodeJoined], [NodeLeft]).
//
// # Envelopes
//
// An envelope holds routing fields (target service id, optional resource
// UUID, correlation id and reply-to), the time left until the sender's
// deadline as a duration (never an absolute time, so clock skew between
// nodes cannot expire or extend it), headers that pass through untouched,
// and a JSON body. [EncodeEnvelope] and [DecodeEnvelope] enforce a size
// limit, valid UTF-8 and a single JSON value with no trailing data.
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
// constants and [Codes]); each code documents, through [Code.Retry],
// whether retrying is safe or the outcome is unknown. An [Error] marshals
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
// [ErrInvalidUUID].
package message
