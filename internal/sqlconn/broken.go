package sqlconn

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"
)

// BrokenConn reports whether err says the connection broke (reset,
// closed mid-use, a network error), not that a statement failed: a pool
// connection dropped since its last use, as after a database outage. A
// statement that failed so did not commit anything on its own, so a read
// or a transaction that had not run its work may be tried once more.
func BrokenConn(err error) bool {
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.As(err, &ne)
}
