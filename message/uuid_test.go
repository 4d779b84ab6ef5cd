package message_test

import (
	"errors"
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNormalizeUUID(t *testing.T) {
	const canonical = "932763162d054c04adaab6ab498c9139"
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{"canonical", canonical, canonical, false},
		{"upper-case", "932763162D054C04ADAAB6AB498C9139", canonical, false},
		{"dashed", "93276316-2d05-4c04-adaa-b6ab498c9139", canonical, false},
		{"dashed upper-case", "93276316-2D05-4C04-ADAA-B6AB498C9139", canonical, false},
		{"empty", "", "", true},
		{"too short", "932763162d054c04adaab6ab498c913", "", true},
		{"too long", canonical + "0", "", true},
		{"non-hex", "932763162d054c04adaab6ab498c913g", "", true},
		{"dash misplaced", "9327631-62d05-4c04-adaa-b6ab498c9139", "", true},
		{"dashed non-hex", "93276316-2d05-4c04-adaa-b6ab498c913z", "", true},
		{"braces", "{93276316-2d05-4c04-adaa-b6ab498c9139}", "", true},
		{"urn", "urn:uuid:93276316-2d05-4c04-adaa-b6ab498c9139", "", true},
		{"spaces", " 932763162d054c04adaab6ab498c9139", "", true},
		{"invalid utf-8", "\xff\xfe2763162d054c04adaab6ab498c9139", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := message.NormalizeUUID(tt.in)
			if tt.wantErr {
				require.Error(t, err)
				assert.ErrorIs(t, err, message.ErrInvalidUUID, "a malformed UUID must carry the invalid_uuid code")
				assert.Equal(t, message.CodeInvalidUUID, message.CodeOf(err))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.True(t, message.IsCanonicalUUID(got))
		})
	}
}

func TestNormalizeUUIDSameOwnerKey(t *testing.T) {
	// The dashed and undashed forms of one UUID must give one ring key.
	for range 100 {
		u := message.NewUUID()
		dashed := u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
		a, err := message.NormalizeUUID(dashed)
		require.NoError(t, err)
		b, err := message.NormalizeUUID(u)
		require.NoError(t, err)
		require.Equal(t, a, b)
	}
}

func TestNormalizeUUIDCanonicalDoesNotAllocate(t *testing.T) {
	const u = "932763162d054c04adaab6ab498c9139"
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := message.NormalizeUUID(u); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

func TestNewUUID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		u := message.NewUUID()
		require.True(t, message.IsCanonicalUUID(u), u)
		require.Equal(t, byte('4'), u[12], "version nibble must be 4: %s", u)
		require.Contains(t, "89ab", string(u[16]), "variant must be RFC 4122: %s", u)
		require.False(t, seen[u])
		seen[u] = true
	}
}

func TestInvalidUUIDErrorSaysWhy(t *testing.T) {
	_, err := message.NormalizeUUID("not-a-uuid")
	var me *message.Error
	require.True(t, errors.As(err, &me))
	assert.Contains(t, me.Details, "length 10")
	assert.Equal(t, message.RetryNever, me.Retry())
}
