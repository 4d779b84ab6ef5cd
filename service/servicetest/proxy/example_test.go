package proxy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
)

// A proxy between a client and an echo server: Cut resets the client's
// connection, Heal lets a new one through. In a test, use proxy.New(t,
// target) or proxy.NewURL(t, url), which close the proxy when the test
// ends.
func Example() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0") // the "server"
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()

	p, err := proxy.Listen(ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	ask := func(c net.Conn, line string) (string, error) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintln(c, line); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}

	c, _ := net.Dial("tcp", p.Addr())
	defer c.Close()
	got, _ := ask(c, "ping")
	fmt.Print("through the proxy: ", got)

	p.Cut()
	_, err = c.Read(make([]byte, 1))
	fmt.Println("after Cut, reset:", errors.Is(err, syscall.ECONNRESET))

	p.Heal()
	c2, _ := net.Dial("tcp", p.Addr())
	defer c2.Close()
	got, _ = ask(c2, "pong")
	fmt.Print("after Heal: ", got)
	// Output:
	// through the proxy: ping
	// after Cut, reset: true
	// after Heal: pong
}

// SetLatency slows a link: here 50 to 75 ms each way, so each round
// trip gains 100 to 150 ms, as a distant database would.
func ExampleProxy_SetLatency() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0") // an echo server
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p, err := proxy.Listen(ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	c, _ := net.Dial("tcp", p.Addr())
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	roundTrip := func() time.Duration {
		start := time.Now()
		_, _ = c.Write([]byte("x"))
		_, _ = c.Read(make([]byte, 1))
		return time.Since(start)
	}

	each := proxy.Latency{Delay: 50 * time.Millisecond, Jitter: 25 * time.Millisecond}
	p.SetLatency(each, each)
	fmt.Println("slowed by 100 ms at least:", roundTrip() >= 100*time.Millisecond)
	p.Heal()
	fmt.Println("after Heal, under 50 ms:", roundTrip() < 50*time.Millisecond)
	// Output:
	// slowed by 100 ms at least: true
	// after Heal, under 50 ms: true
}
