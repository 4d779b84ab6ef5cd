package main

import "syscall"

// childProcAttr makes a child process end with this one: the kernel
// sends it SIGKILL when its parent dies, so a killed test binary or
// `refnode scale` leaves no `refnode serve` running against the shared
// broker and database.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
