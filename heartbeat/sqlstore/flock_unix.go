//go:build unix

package sqlstore

import (
	"errors"
	"os"
	"syscall"
)

// tryFlock takes an exclusive flock(2) on f without waiting; false if
// another open file description holds it.
func tryFlock(f *os.File) (bool, error) {
	conn, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var ferr error
	if err := conn.Control(func(fd uintptr) { ferr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB) }); err != nil {
		return false, err
	}
	if errors.Is(ferr, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return ferr == nil, ferr
}
