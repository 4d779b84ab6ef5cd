package main

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
)

// TestCtlSetImageName: set-image-name builds a plain SetImageName, or a
// compare-and-set with -if, "" included, from its flags and arguments.
func TestCtlSetImageName(t *testing.T) {
	const id = "932763162d054c04adaab6ab498c9139"
	for _, c := range []struct {
		args []string
		want api.SetImageName
	}{
		{[]string{id, "ubuntu"}, api.SetImageName{UUID: id, Name: "ubuntu"}},
		{[]string{"-if", "old", "93276316-2D05-4C04-ADAA-B6AB498C9139", "new"}, api.SetImageName{UUID: id, Name: "new", IfName: new("old")}},
		{[]string{"-if", "", id, "first"}, api.SetImageName{UUID: id, Name: "first", IfName: new("")}},
		{[]string{"-if=", id, ""}, api.SetImageName{UUID: id, Name: "", IfName: new("")}},
	} {
		fs := flag.NewFlagSet("set-image-name", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		build := ctlCommands["set-image-name"].flags(fs)
		require.NoError(t, fs.Parse(c.args))
		msg, err := build(fs.Args())
		require.NoError(t, err, "%q", c.args)
		assert.Equal(t, c.want, msg, "%q", c.args)
	}
}
