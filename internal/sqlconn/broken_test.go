package sqlconn_test

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

func TestBrokenConn(t *testing.T) {
	for _, c := range []struct {
		err    error
		broken bool
	}{
		{driver.ErrBadConn, true},
		{fmt.Errorf("write failed: %w", &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{fmt.Errorf("read: %w", syscall.EPIPE), true},
		{errors.New("ERROR: duplicate key value (SQLSTATE 23505)"), false},
		{nil, false},
	} {
		if got := sqlconn.BrokenConn(c.err); got != c.broken {
			t.Errorf("BrokenConn(%v) = %v, want %v", c.err, got, c.broken)
		}
	}
}
