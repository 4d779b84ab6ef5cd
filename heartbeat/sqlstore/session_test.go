package sqlstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestSessionKeysOfBothSigns: a PostgreSQL advisory lock's 64-bit key is
// signed; Check finds the lock in pg_locks (its two 32-bit halves) for a
// key with the top bit set and for one without.
func TestSessionKeysOfBothSigns(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]string{"postgres": testenv.PostgresDSN(t), "mysql": testenv.MySQLDSN(t)} {
		t.Run(name, func(t *testing.T) {
			s := openFresh(t, url)
			found := map[bool]bool{}
			for len(found) < 2 {
				node := message.NewUUID()
				top := s.LockKey(node)>>63 == 1
				if found[top] {
					continue
				}
				found[top] = true
				h, err := s.HoldSession(t.Context(), node)
				require.NoError(t, err)
				require.NoError(t, h.Check(t.Context()), "Check of a held lock whose key has the top bit %v", top)
				free, err := s.SessionFree(t.Context(), node)
				require.NoError(t, err)
				require.False(t, free)
				require.NoError(t, h.Release())
				require.Error(t, h.Check(t.Context()), "Check after Release")
			}
		})
	}
}
