package amqpbus

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpAcked reports, for a TCP connection, the bytes the peer has
// acknowledged in all and whether bytes of ours wait unacknowledged or
// unsent in the kernel; ok is false if the kernel cannot tell.
func tcpAcked(c net.Conn) (acked uint64, waiting, ok bool) {
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return 0, false, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false, false
	}
	var info *unix.TCPInfo
	cerr := raw.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if cerr != nil || err != nil || info == nil {
		return 0, false, false
	}
	return info.Bytes_acked, info.Unacked > 0 || info.Notsent_bytes > 0, true
}
