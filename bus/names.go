package bus

import (
	"strings"
)

// DefaultPrefix is the queue name prefix used when Config.Prefix is empty.
const DefaultPrefix = "cloudbus"

// APIPortal is the well-known service id of the API portal. Its one queue,
// <prefix>.message.api.portal, is shared by the API services of all nodes,
// so the broker load-balances API messages among them.
const APIPortal = "api.portal"

// ServiceID returns the id of a service on a node: "<service>.<node>",
// e.g. "vmInstance.3694776ab31a45709259254a018913ca".
func ServiceID(service, node string) string {
	return service + "." + node
}

// SplitServiceID splits "<service>.<node>" into its parts. It reports false
// for the api.portal id and for ids without a node part.
func SplitServiceID(id string) (service, node string, ok bool) {
	if id == APIPortal {
		return "", "", false
	}
	i := strings.LastIndexByte(id, '.')
	if i <= 0 || i == len(id)-1 {
		return "", "", false
	}
	return id[:i], id[i+1:], true
}

// validService reports whether a service name is usable in a queue name:
// non-empty, ASCII letters, digits, '_' and '-', at most 64 bytes.
func validService(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validPrefix reports whether a queue prefix is usable: like a service
// name, but dots are allowed between segments.
func validPrefix(p string) bool {
	if p == "" || len(p) > 128 {
		return false
	}
	// RabbitMQ reserves "amq." names, and a prefix starting "amq.gen-"
	// would make the bus's own queues look like broker-named reply queues
	// to ValidReplyTo (found by FuzzEnvelopeAddresses).
	if first, _, _ := strings.Cut(p, "."); strings.EqualFold(first, "amq") {
		return false
	}
	for _, seg := range strings.Split(p, ".") {
		if !validService(seg) {
			return false
		}
	}
	return true
}

// apiEntry returns the name of the entry api.portal sits behind
// ([driver.Transport.DeclareEntry]): "<prefix>.api".
func (b *CloudBus) apiEntry() string { return b.cfg.Prefix + ".api" }
