package message

// TypeEmpty is the name of [Empty], registered in every [Registry].
const TypeEmpty = "cloudbus.v1.Empty"

// Empty is a payload with no fields, for requests and replies without any.
type Empty struct{}

// DefaultMaxSize is the default limit of an encoded envelope: 4 MiB.
const DefaultMaxSize = 4 << 20
