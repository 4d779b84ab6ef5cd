package testenv_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cloudbus-go/cloudbus/internal/testenv"
)

// fakeT records what a helper does to its test instead of doing it.
type fakeT struct {
	testing.TB // nil: any other method panics
	skipped    string
	failed     string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Skipf(format string, args ...any) { f.skipped = fmt.Sprintf(format, args...) }

func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestHelpers(t *testing.T) {
	for _, c := range []struct {
		name    string
		get     func(testing.TB) string
		example string
	}{
		{testenv.AMQPVar, testenv.AMQPURL, "amqp://guest:guest@127.0.0.1:5672/"},
		{testenv.PostgresVar, testenv.PostgresDSN, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
		{testenv.MySQLVar, testenv.MySQLDSN, "root@tcp(127.0.0.1:3306)/test?parseTime=true"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.name, "value-of-"+c.name)
			t.Setenv("CI", "true")
			f := &fakeT{}
			assert.Equal(t, "value-of-"+c.name, c.get(f), "a set variable is returned")
			assert.Empty(t, f.skipped+f.failed, "a set variable neither skips nor fails")

			t.Setenv(c.name, "")
			for _, notCI := range []string{"", "false", "1"} {
				t.Setenv("CI", notCI)
				f = &fakeT{}
				assert.Empty(t, c.get(f))
				assert.Empty(t, f.failed, "without CI=true an unset variable skips (CI=%q)", notCI)
				assert.Contains(t, f.skipped, c.name, "the skip message names the variable")
				assert.Contains(t, f.skipped, c.example, "the skip message gives an example value")
				assert.False(t, testenv.WillRun(c.name))
			}

			t.Setenv("CI", "true")
			f = &fakeT{}
			assert.Empty(t, c.get(f))
			assert.Empty(t, f.skipped, "under CI=true an unset variable never skips")
			assert.Contains(t, f.failed, c.name, "the failure names the variable")
			assert.Contains(t, f.failed, "CI=true")
			assert.True(t, testenv.WillRun(c.name), "under CI=true the tests run (and fail)")
		})
	}
}

func TestWillRun(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv(testenv.AMQPVar, "amqp://x/")
	assert.True(t, testenv.WillRun(testenv.AMQPVar))
	t.Setenv(testenv.AMQPVar, "")
	assert.False(t, testenv.WillRun(testenv.AMQPVar))
}

// TestRealSkip runs a helper on a real test: with the variable unset and
// CI unset, the subtest is skipped, and the code after the call does not
// run.
func TestRealSkip(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv(testenv.MySQLVar, "")
	ran := false
	t.Run("needs MySQL", func(t *testing.T) {
		testenv.MySQLDSN(t)
		ran = true
	})
	assert.False(t, ran, "the test stopped at the helper")
}
