//go:build !unix

package sqlstore

import (
	"errors"
	"os"
)

// tryFlock: SQLite session locks need flock(2), which this system lacks.
func tryFlock(*os.File) (bool, error) {
	return false, errors.New("session locks on SQLite need a unix system (flock)")
}
