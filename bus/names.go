package bus

import (
	"strings"
)

// DefaultPrefix is the queue name prefix when Config.Prefix is empty.
const DefaultPrefix = "cloudbus"

// APIPortal is the service id of the API portal, whose one queue,
// <prefix>.message.api.portal, the API services of all nodes share.
const APIPortal = "api.portal"

// ServiceID returns the id of a service on a node: "<service>.<node>".
func ServiceID(service, node string) string {
	return service + "." + node
}

// SplitServiceID splits "<service>.<node>" into its parts; ok is false for
// api.portal and ids without a node.
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

// validService reports a usable service name: 1 to 64 ASCII letters,
// digits, '_' and '-'.
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

// validPrefix reports a usable prefix: dot-separated service names.
func validPrefix(p string) bool {
	if p == "" || len(p) > 128 {
		return false
	}
	// "amq" is reserved (docs/design.md, "Delivery rules").
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

// apiEntry returns the name of the entry api.portal sits behind.
func (b *CloudBus) apiEntry() string { return b.cfg.Prefix + ".api" }
