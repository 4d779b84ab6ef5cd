package nodekit

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSettingsTrace: -trace takes none (the default), stdout or otlp,
// from the flag or <PREFIX>_TRACE; anything else is refused naming the
// choices.
func TestSettingsTrace(t *testing.T) {
	parse := func(args []string, env map[string]string) (Settings, error) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var s Settings
		s.Register(fs, "x")
		if err := Parse(fs, args, "X", func(k string) string { return env[k] }); err != nil {
			return s, err
		}
		return s, s.Validate("X")
	}
	s, err := parse([]string{"-bus", "amqp://127.0.0.1/"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "none", s.Trace)
	s, err = parse([]string{"-bus", "amqp://127.0.0.1/"}, map[string]string{"X_TRACE": "otlp"})
	require.NoError(t, err)
	assert.Equal(t, "otlp", s.Trace)
	_, err = parse([]string{"-bus", "amqp://127.0.0.1/", "-trace", "jaeger"}, nil)
	assert.ErrorContains(t, err, `-trace "jaeger": use none, stdout or otlp`)
}
