package volume_test

import "syscall"

// childProcAttr makes a volumed process end with the test binary: the
// kernel sends it SIGKILL when its parent dies, so a killed test run
// leaves no volumed running against the shared broker and database.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
