//go:build !linux

package amqpbus

import "net"

// tcpAcked reports that the kernel cannot tell (see the Linux version).
func tcpAcked(net.Conn) (acked uint64, waiting, ok bool) { return 0, false, false }
