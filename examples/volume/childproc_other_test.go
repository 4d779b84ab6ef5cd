//go:build !linux

package volume_test

import "syscall"

// childProcAttr returns nil: only Linux ends a child with its parent
// (Pdeathsig). Elsewhere a killed test run leaves its volumed running.
func childProcAttr() *syscall.SysProcAttr { return nil }
