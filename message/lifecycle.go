package message

// TypeEmpty is the name of [Empty], registered in every [Registry].
const TypeEmpty = "cloudbus.v1.Empty"

// Empty is a payload with no fields, for requests that need no arguments
// and replies that carry no result.
type Empty struct{}

// DefaultMaxSize is the default limit, in bytes, of an encoded envelope
// (4 MiB). Transports may set their own limit.
const DefaultMaxSize = 4 << 20
