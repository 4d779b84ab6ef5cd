package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/internal/testenv"
)

// The preamble every process test shares: the refnode binary, built once.

// The refnode binary the process tests run, built once by TestMain when
// those tests will run (CLOUDBUS_AMQP_URL set, or CI=true: see
// testenv.WillRun).
var (
	refnodeBin string
	buildErr   error
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(buildFirst{m})
}

// buildFirst builds the refnode binary before the tests run and removes
// it after.
type buildFirst struct{ m *testing.M }

func (b buildFirst) Run() int {
	if testenv.WillRun(testenv.AMQPVar) {
		dir, err := os.MkdirTemp("", "refnode-bin-")
		if err != nil {
			buildErr = err
		} else {
			defer os.RemoveAll(dir)
			refnodeBin = filepath.Join(dir, "refnode")
			buildErr = build(refnodeBin)
		}
	}
	return b.m.Run()
}

// build runs go build -o bin . in this package's directory.
func build(bin string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("find the go command to build refnode: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build -o %s .: %w\n%s", bin, err, out)
	}
	return nil
}
