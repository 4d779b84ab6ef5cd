package message

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// NormalizeUUID returns the canonical form of a resource or node UUID:
// 32 lower-case hexadecimal digits without dashes, the form the design
// article uses (932763162d054c04adaab6ab498c9139).
//
// It accepts the 32-digit form and the 36-character dashed form
// (8-4-4-4-12) in any letter case, so the dashed and undashed spellings
// of one UUID always normalize, and therefore hash, to the same owner.
// Anything else is rejected with an error matching [ErrInvalidUUID]
// that says what was wrong. An input already in canonical form is
// returned as is, without allocating.
func NormalizeUUID(s string) (string, error) {
	switch len(s) {
	case 32:
		canonical := true
		for i := 0; i < 32; i++ {
			c := s[i]
			switch {
			case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
			case 'A' <= c && c <= 'F':
				canonical = false
			default:
				return "", invalidUUID(s, fmt.Sprintf("character %d is %q, not a hexadecimal digit", i, c))
			}
		}
		if canonical {
			return s, nil
		}
		var b [32]byte
		for i := 0; i < 32; i++ {
			b[i] = lower(s[i])
		}
		return string(b[:]), nil
	case 36:
		var b [32]byte
		n := 0
		for i := 0; i < 36; i++ {
			c := s[i]
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' {
					return "", invalidUUID(s, fmt.Sprintf("character %d is %q, want '-' (form 8-4-4-4-12)", i, c))
				}
				continue
			}
			if !isHex(c) {
				return "", invalidUUID(s, fmt.Sprintf("character %d is %q, not a hexadecimal digit", i, c))
			}
			b[n] = lower(c)
			n++
		}
		return string(b[:]), nil
	default:
		return "", invalidUUID(s, fmt.Sprintf("length %d, want 32 hex digits or 36 characters in the dashed form", len(s)))
	}
}

// IsCanonicalUUID reports whether s is already in canonical form
// (32 lower-case hexadecimal digits). It does not allocate.
func IsCanonicalUUID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < 32; i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// NewUUID returns a random version-4 UUID in canonical form. It is used
// for node UUIDs and message ids. It panics only if the operating
// system's random source fails, which crypto/rand documents as fatal.
func NewUUID() string {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		panic("message: crypto/rand failed: " + err.Error())
	}
	u[6] = (u[6] & 0x0f) | 0x40 // version 4
	u[8] = (u[8] & 0x3f) | 0x80 // variant RFC 4122
	return hex.EncodeToString(u[:])
}

func invalidUUID(s, why string) *Error {
	const max = 64
	shown := s
	if len(shown) > max {
		shown = shown[:max] + "..."
	}
	return &Error{
		Code:        CodeInvalidUUID,
		Description: "invalid UUID: want 32 hex digits, optionally dashed 8-4-4-4-12",
		Details:     fmt.Sprintf("%q: %s", shown, why),
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}
