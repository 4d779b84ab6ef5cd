// Package message defines what travels on the cloud bus: the [Registry]
// of typed payloads, the coded [Error] that replies carry across nodes,
// canonical resource UUIDs and the [Routed] payloads that name one. The
// wire format, for clients in any language, is docs/wire.md.
//
// # Typed payloads
//
// Payload types are registered under stable, versioned names such as
// "refnode.v1.StartVm" ([ValidTypeName]); decoding instantiates only
// registered types. There is no global registry: create one with
// [NewRegistry] and give it to the bus.
//
// # Errors that survive the wire
//
// Every failure a caller may see has a [Code], and every code one retry
// class ([Code.Retry]) saying whether retrying is safe. Match errors with
// errors.Is against the sentinels, such as [ErrNotFound]: an error
// decoded on another node still matches. A service registers codes of
// its own, with their classes, by [RegisterCode]; an error carries its
// class on the wire, so a caller that does not know the code still
// learns it ([Error.Retry]).
//
// # Resource UUIDs
//
// [NormalizeUUID] gives a UUID its one spelling, which the ring hashes;
// [NewUUID] makes random ones.
//
// # Routing by resource
//
// A payload type about one existing resource implements [Routed]: the
// bus routes it to the resource's owner.
//
// # Wire format and versions
//
// Every envelope carries its sender's protocol version; a receiver
// refuses a higher one. The protocol changes by these rules:
//
//  1. An optional field whose absence keeps today's meaning needs no new
//     version: receivers ignore unknown fields.
//  2. A new error code needs none: an older node reads it as
//     [RetryUnknown]; a newer one that does not know it reads its class
//     from the error's "retry" field.
//  3. A changed payload is registered under a new type name
//     ("refnode.v2.StartVm").
//  4. Anything an older receiver would misread bumps the version, in two
//     rolling steps: nodes that read both and write the old, then the new.
package message
