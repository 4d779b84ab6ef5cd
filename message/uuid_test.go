package message_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/google/uuid"
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
		// github.com/google/uuid parses these spellings; the contract does not.
		{"braces", "{93276316-2d05-4c04-adaa-b6ab498c9139}", "", true},
		{"braces undashed", "{932763162d054c04adaab6ab498c9139}", "", true},
		{"urn", "urn:uuid:93276316-2d05-4c04-adaa-b6ab498c9139", "", true},
		{"urn upper-case", "URN:UUID:93276316-2D05-4C04-ADAA-B6AB498C9139", "", true},
		{"urn undashed", "urn:uuid:932763162d054c04adaab6ab498c9139", "", true},
		{"dashed in braces", "(93276316-2d05-4c04-adaa-b6ab498c9139)", "", true},
		{"spaces", " 932763162d054c04adaab6ab498c9139", "", true},
		{"invalid utf-8", "\xff\xfe2763162d054c04adaab6ab498c9139", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := message.NormalizeUUID(tt.in)
			if tt.wantErr {
				require.Error(t, err)
				assert.ErrorIs(t, err, message.ErrInvalidUUID, "a malformed UUID must carry the invalid_uuid code")
				assert.Equal(t, message.ErrInvalidUUID.Code, message.CodeOf(err))
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
		parsed, err := uuid.Parse(u)
		require.NoError(t, err)
		require.Equal(t, uuid.Version(4), parsed.Version())
		require.Equal(t, uuid.RFC4122, parsed.Variant())
		require.False(t, seen[u])
		seen[u] = true
	}
}

func TestInvalidUUIDErrorSaysWhy(t *testing.T) {
	tests := []struct{ in, want string }{
		{"not-a-uuid", "length 10"},
		{"urn:uuid:93276316-2d05-4c04-adaa-b6ab498c9139", "length 45, want 32 hex digits or 36 characters"},
		{"{93276316-2d05-4c04-adaa-b6ab498c9139}", "length 38, want 32 hex digits or 36 characters"},
		{"932763162d054c04adaab6ab498c913g", `character 31 is 'g', not a hexadecimal digit`},
		{"93276316-2d05-4c04-adaa-b6ab498c913z", `character 35 is 'z', not a hexadecimal digit`},
		{"9327631-62d05-4c04-adaa-b6ab498c9139", `character 7 is '-', not a hexadecimal digit`},
		{"93276316_2d05-4c04-adaa-b6ab498c9139", `character 8 is '_', want '-' (form 8-4-4-4-12)`},
		{"93276316-2d05-4c04-adaa-b6ab498c9139" + "0", "length 37"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := message.NormalizeUUID(tt.in)
			var me *message.Error
			require.True(t, errors.As(err, &me))
			assert.Contains(t, me.Details, tt.want)
			assert.Contains(t, me.Details, tt.in, "the details quote the input")
			assert.Equal(t, message.RetryNever, me.Retry())
		})
	}
}

func TestInvalidUUIDDetailsAreBounded(t *testing.T) {
	_, err := message.NormalizeUUID(strings.Repeat("a", 10000))
	var me *message.Error
	require.True(t, errors.As(err, &me))
	assert.Less(t, len(me.Details), 200, "a hostile input is truncated in the details")
	assert.Contains(t, me.Details, "length 10000")
}

func BenchmarkNormalizeUUID(b *testing.B) {
	for _, bc := range []struct{ name, in string }{
		{"canonical", "932763162d054c04adaab6ab498c9139"},
		{"upper-case", "932763162D054C04ADAAB6AB498C9139"},
		{"dashed", "93276316-2d05-4c04-adaa-b6ab498c9139"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := message.NormalizeUUID(bc.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzNormalizeUUID checks NormalizeUUID against its contract written out
// plainly: exactly the 32-digit and the dashed 8-4-4-4-12 forms, in any
// case, are accepted, and give the lower-case hex digits of the UUID that
// github.com/google/uuid parses.
func FuzzNormalizeUUID(f *testing.F) {
	for _, s := range []string{
		"932763162d054c04adaab6ab498c9139",
		"93276316-2D05-4C04-ADAA-B6AB498C9139",
		"{93276316-2d05-4c04-adaa-b6ab498c9139}",
		"urn:uuid:93276316-2d05-4c04-adaa-b6ab498c9139",
		"93276316x2d05-4c04-adaa-b6ab498c9139",
		"932763162d054c04adaab6ab498c913\xff",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := message.NormalizeUUID(s)
		if want := contractForm(s); (err == nil) != want {
			t.Fatalf("NormalizeUUID(%q) error %v, but the contract says accepted=%v", s, err, want)
		}
		if err != nil {
			if message.CodeOf(err) != message.ErrInvalidUUID.Code {
				t.Fatalf("error without the invalid_uuid code: %v", err)
			}
			return
		}
		u, perr := uuid.Parse(s)
		if perr != nil {
			t.Fatalf("accepted %q, which google/uuid rejects: %v", s, perr)
		}
		if want := strings.ReplaceAll(u.String(), "-", ""); got != want {
			t.Fatalf("NormalizeUUID(%q) = %q, want %q", s, got, want)
		}
		if again, err := message.NormalizeUUID(got); err != nil || again != got {
			t.Fatalf("not idempotent: %q -> %q, %v", got, again, err)
		}
	})
}

// contractForm reports whether s is a UUID spelling NormalizeUUID accepts.
func contractForm(s string) bool {
	hex := func(c byte) bool { return strings.IndexByte("0123456789abcdefABCDEF", c) >= 0 }
	switch len(s) {
	case 32:
		for i := range len(s) {
			if !hex(s[i]) {
				return false
			}
		}
		return true
	case 36:
		for i := range len(s) {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if s[i] != '-' {
					return false
				}
			} else if !hex(s[i]) {
				return false
			}
		}
		return true
	}
	return false
}
