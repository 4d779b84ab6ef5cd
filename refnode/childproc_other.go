//go:build !linux

package main

import "syscall"

// childProcAttr returns nil: only Linux ends a child with its parent
// (Pdeathsig). Elsewhere a killed parent leaves its children running.
func childProcAttr() *syscall.SysProcAttr { return nil }
