package message

import (
	"fmt"
	"sync"
)

// maxCodeLen bounds a registered code's length in bytes.
const maxCodeLen = 64

// registered holds the codes services registered, process-wide.
var registered struct {
	mu    sync.RWMutex
	codes map[Code]*Error // the sentinel of each registered code
	retry map[Code]Retry
}

// RegisterCode registers a service's own error code with its retry
// class, for every node and client in this process, and returns the
// code's sentinel, with description as its Description: return it, with
// [Error.WithDetails], from a handler, and match it with errors.Is on
// the caller's side.
//
// A code is lower-case snake case, at most 64 bytes: a letter, then
// letters and digits in words joined by single underscores
// ("volume_attached"). It must not be a built-in code ([Codes]). retry
// is one of [RetryUnknown], [RetrySafe], [RetryNever] and [RetryRan],
// and description must not be empty. Registering a code again with the
// same class returns the first sentinel (and its description); with
// another class it is an error: a code has one class. Codes are wire
// format: never change one's meaning or class, register a new code.
//
// Every error now carries its class on the wire, so a caller that did
// not register the code (a client in another language, a Go node of
// another service) still learns it ([Error.Retry]); one that did uses
// its own. RegisterCode is safe for concurrent use; register codes at
// start-up, in package-level variables with [MustRegisterCode].
func RegisterCode(code Code, retry Retry, description string) (*Error, error) {
	if !validCode(code) {
		return nil, fmt.Errorf("message: register code %q: not a code: want lower-case snake case of at most %d bytes, such as \"volume_attached\"", truncateCode(code), maxCodeLen)
	}
	for _, e := range codeTable {
		if e.code == code {
			return nil, fmt.Errorf("message: register code %q: it is a built-in code (class %q): use its sentinel, or name your code otherwise", code, retryNames[e.retry])
		}
	}
	if retry < RetryUnknown || retry > RetryRan {
		return nil, fmt.Errorf("message: register code %q: retry class %v is not one of RetryUnknown, RetrySafe, RetryNever, RetryRan", code, retry)
	}
	if description == "" {
		return nil, fmt.Errorf("message: register code %q: give it a description, saying what failed", code)
	}
	registered.mu.Lock()
	defer registered.mu.Unlock()
	if s, ok := registered.codes[code]; ok {
		if was := registered.retry[code]; was != retry {
			return nil, fmt.Errorf("message: register code %q with retry class %q: it is registered with class %q; a code has one class", code, retryNames[retry], retryNames[was])
		}
		return s, nil
	}
	if registered.codes == nil {
		registered.codes = make(map[Code]*Error)
		registered.retry = make(map[Code]Retry)
	}
	s := &Error{Code: code, Description: description}
	registered.codes[code] = s
	registered.retry[code] = retry
	return s, nil
}

// MustRegisterCode is [RegisterCode], panicking on error; for
// package-level variables:
//
//	var ErrVolumeAttached = message.MustRegisterCode("volume_attached", message.RetryNever, "the volume is attached to another VM")
func MustRegisterCode(code Code, retry Retry, description string) *Error {
	s, err := RegisterCode(code, retry, description)
	if err != nil {
		panic(err)
	}
	return s
}

// registeredRetry returns the class of a registered code.
func registeredRetry(c Code) (Retry, bool) {
	registered.mu.RLock()
	defer registered.mu.RUnlock()
	r, ok := registered.retry[c]
	return r, ok
}

// validCode reports lower-case snake case of at most maxCodeLen bytes:
// ^[a-z][a-z0-9]*(_[a-z0-9]+)*$.
func validCode(c Code) bool {
	if c == "" || len(c) > maxCodeLen || c[0] < 'a' || c[0] > 'z' || c[len(c)-1] == '_' {
		return false
	}
	for i := 1; i < len(c); i++ {
		switch b := c[i]; {
		case 'a' <= b && b <= 'z', '0' <= b && b <= '9':
		case b == '_' && c[i-1] != '_':
		default:
			return false
		}
	}
	return true
}

// truncateCode shortens a code for an error message.
func truncateCode(c Code) string {
	if len(c) > maxCodeLen+8 {
		return string(c[:maxCodeLen+8]) + "..."
	}
	return string(c)
}
