package message

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/google/uuid"
)

// NormalizeUUID returns the canonical form of a UUID: 32 lower-case hex
// digits. It accepts that form and the dashed 8-4-4-4-12 form in any case;
// anything else fails with [ErrInvalidUUID] saying what is wrong. It is
// safe for concurrent use, and returns a canonical input without
// allocating.
func NormalizeUUID(s string) (string, error) {
	if IsCanonicalUUID(s) {
		return s, nil // the common case: no parse, no allocation
	}
	// uuid.Parse takes more spellings than these two.
	if len(s) != 32 && len(s) != 36 {
		return "", invalidUUID(s, fmt.Sprintf("length %d, want 32 hex digits or 36 characters in the dashed form", len(s)))
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return "", invalidUUID(s, uuidProblem(s, err))
	}
	return canonicalUUID(u), nil
}

// uuidProblem says which character of s is wrong.
func uuidProblem(s string, err error) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if len(s) == 36 && (i == 8 || i == 13 || i == 18 || i == 23) {
			if c != '-' {
				return fmt.Sprintf("character %d is %q, want '-' (form 8-4-4-4-12)", i, c)
			}
			continue
		}
		if !isHex(c) {
			return fmt.Sprintf("character %d is %q, not a hexadecimal digit", i, c)
		}
	}
	return err.Error() // not reached while uuid.Parse accepts exactly these forms
}

// IsCanonicalUUID reports whether s is 32 lower-case hex digits. It does
// not allocate.
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

// NewUUID returns a random version-4 UUID in canonical form. It is safe
// for concurrent use and panics only if the system's random source fails.
func NewUUID() string {
	var u uuid.UUID
	// crypto/rand.Read fills a stack array (uuid.NewRandom reads through
	// an io.Reader, which costs an allocation on every message) and
	// never fails: on a broken random source it crashes the program.
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant RFC 4122
	return canonicalUUID(u)
}

func canonicalUUID(u uuid.UUID) string {
	var b [32]byte
	hex.Encode(b[:], u[:])
	return string(b[:])
}

func invalidUUID(s, why string) *Error {
	const max = 64
	shown := s
	if len(shown) > max {
		shown = shown[:max] + "..."
	}
	return &Error{
		Code:        codeInvalidUUID,
		Description: "invalid UUID: want 32 hex digits, optionally dashed 8-4-4-4-12",
		Details:     fmt.Sprintf("%q: %s", shown, why),
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
