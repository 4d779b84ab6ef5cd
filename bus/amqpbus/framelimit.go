package amqpbus

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
)

// AMQP 0-9-1 frames (section 4.2.3 of the specification): type (1 byte),
// channel (2), payload size (4), payload, frame end (0xCE).
const (
	frameHeaderLen = 7
	frameHeader    = 2 // a content header: class, weight, body size (8 bytes), properties
	frameBody      = 3
	frameEnd       = 0xCE
	// contentPrefixLen is what a content header's payload must hold for
	// its body size to be read: class (2), weight (2), body size (8).
	contentPrefixLen = 12
)

// limitConn cuts every message body the broker delivers to at most
// limit+1 bytes before amqp091 reads it. It sits between the socket (or
// the TLS session) and amqp091's frame reader: it rewrites a content
// header announcing a body longer than limit to announce limit+1 bytes,
// passes that many body bytes, and discards the rest of the body frames
// as they arrive. Everything else passes byte for byte.
//
// It reads the socket through its own buffer: parsing reads a frame's
// header, its content prefix and its payload separately, and unbuffered
// each would be a read system call of its own (three per frame, where
// amqp091 alone reads many frames in one): under 64 concurrent callers
// that made the socket reads 5 times as costly per call as amqp091's.
//
// limitConn is read by amqp091's one reader goroutine; it is not safe for
// concurrent Reads. Write, Close and deadlines are the connection's.
type limitConn struct {
	net.Conn
	limit uint64 // bodies longer than this are cut to limit+1 bytes

	raw     bool   // not AMQP frames (a protocol header refusing our version): pass everything
	started bool   // the first frame header was read
	pending []byte // bytes to hand out before reading on
	pass    int64  // bytes of the stream to pass through
	drop    int64  // bytes of the stream to discard, after pass
	after   []byte // bytes to hand out after pass and drop: a frame end

	// now, if set, reads a monotonic clock; lastRead is its reading at
	// the last read that returned bytes, for the liveness probe.
	now      func() int64
	lastRead atomic.Int64

	in   *bufio.Reader       // the connection, buffered, through fill
	cuts map[uint16]*bodyCut // channels whose current body is being cut
	hdr  [frameHeaderLen + contentPrefixLen]byte
	end  [1]byte
	junk []byte // scratch for discarded bytes
}

// bodyCut tracks one body that limitConn is cutting.
type bodyCut struct {
	left uint64 // body bytes the broker still sends
	keep uint64 // body bytes still to pass
}

// limitConnBuffer is the size of limitConn's read buffer.
const limitConnBuffer = 32 << 10

func newLimitConn(c net.Conn, limit int) *limitConn {
	l := &limitConn{Conn: c, limit: uint64(limit), cuts: make(map[uint16]*bodyCut), end: [1]byte{frameEnd}}
	l.in = bufio.NewReaderSize(readerFunc(l.fill), limitConnBuffer)
	return l
}

// Read hands out the filtered stream.
func (c *limitConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		switch {
		case len(c.pending) > 0:
			n := copy(p, c.pending)
			c.pending = c.pending[n:]
			return n, nil
		case c.raw:
			return c.read(p)
		case c.pass > 0:
			n, err := c.read(p[:min(int64(len(p)), c.pass)])
			c.pass -= int64(n)
			return n, err
		case c.drop > 0:
			if c.junk == nil {
				c.junk = make([]byte, 32<<10)
			}
			n, err := c.read(c.junk[:min(int64(len(c.junk)), c.drop)])
			c.drop -= int64(n)
			if err != nil {
				return 0, err
			}
		case c.after != nil:
			c.pending, c.after = c.after, nil
		default:
			if err := c.next(); err != nil {
				return 0, err
			}
		}
	}
}

// read reads from the connection, noting when bytes arrived.
func (c *limitConn) read(p []byte) (int, error) {
	return c.in.Read(p)
}

// fill reads the connection, noting the time when it returns bytes.
func (c *limitConn) fill(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.now != nil {
		c.lastRead.Store(c.now())
	}
	return n, err
}

// readFull is io.ReadFull through read.
func (c *limitConn) readFull(p []byte) error {
	_, err := io.ReadFull(readerFunc(c.read), p)
	return err
}

// readerFunc is a function as an io.Reader.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// next reads the next frame's header and decides what to do with it.
func (c *limitConn) next() error {
	h := c.hdr[:frameHeaderLen]
	if err := c.readFull(h); err != nil {
		return err
	}
	if !c.started {
		c.started = true
		if h[0] == 'A' { // "AMQP" and a version: the broker refuses ours
			c.raw, c.pending = true, h
			return nil
		}
	}
	typ, ch, size := h[0], binary.BigEndian.Uint16(h[1:3]), int64(binary.BigEndian.Uint32(h[3:7]))
	switch {
	case typ == frameHeader && size >= contentPrefixLen:
		full := c.hdr[:]
		if err := c.readFull(full[frameHeaderLen:]); err != nil {
			return err
		}
		delete(c.cuts, ch) // a new content header ends whatever came before on ch
		if n := binary.BigEndian.Uint64(full[frameHeaderLen+4:]); n > c.limit {
			binary.BigEndian.PutUint64(full[frameHeaderLen+4:], c.limit+1)
			c.cuts[ch] = &bodyCut{left: n, keep: c.limit + 1}
		}
		c.pending, c.pass = full, size-contentPrefixLen+1
	case typ == frameBody && c.cuts[ch] != nil:
		cut := c.cuts[ch]
		n := uint64(size)
		switch {
		case n <= cut.keep: // wholly kept
			cut.keep -= n
			c.pending, c.pass = h, size+1
		case cut.keep > 0: // kept up to the cut: a shorter frame
			binary.BigEndian.PutUint32(h[3:7], uint32(cut.keep))
			c.pending, c.pass, c.drop, c.after = h, int64(cut.keep), size-int64(cut.keep)+1, c.end[:]
			cut.keep = 0
		default: // wholly past the cut
			c.drop = size + 1
		}
		if n >= cut.left {
			delete(c.cuts, ch)
		} else {
			cut.left -= n
		}
	default:
		if typ != frameBody { // a method (or heartbeat) ends content on its channel
			delete(c.cuts, ch)
		}
		c.pending, c.pass = h, size+1
	}
	return nil
}
