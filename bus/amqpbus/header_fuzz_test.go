package amqpbus

import (
	"strconv"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// FuzzDeliveryHeaders checks what the transport reads from the AMQP
// headers of a message, which any publisher to a queue may set: a poison
// message is dead-lettered after at most MaxDeliveries deliveries counted
// by the transport, whatever delivery count (x-cloudbus-deliveries) it
// arrived with, and a header of any type reads as a string without
// panicking (an integer as its decimal form).
func FuzzDeliveryHeaders(f *testing.F) {
	f.Add(byte(0), int64(1), "", 10)
	f.Add(byte(1), int64(9), "", 10)
	f.Add(byte(2), int64(3), "", 1)
	f.Add(byte(3), int64(0), "7", 10)
	f.Add(byte(4), int64(0), "", 10)
	f.Add(byte(0), int64(1)<<40, "", 3)
	f.Add(byte(5), int64(0), "", 3)
	f.Fuzz(func(t *testing.T, kind byte, n int64, s string, limit int) {
		if limit < 1 || limit > 1000 {
			limit = 10
		}
		h := amqp.Table{}
		switch kind % 7 {
		case 0:
			h[headerDeliveries] = n
		case 1:
			h[headerDeliveries] = int32(n)
		case 2:
			h[headerDeliveries] = int(n)
		case 3:
			h[headerDeliveries] = s
		case 4: // absent: the first delivery
		case 5:
			h[headerDeliveries] = float64(n)
		case 6:
			h[headerDeliveries] = nil
		}
		// Redeliver as the consumer does (recount) until the message is
		// dead-lettered: at most limit more deliveries.
		for i := 0; ; i++ {
			c := deliveries(h) + 1
			if c > limit {
				break
			}
			if i == limit {
				t.Fatalf("a message arriving with %s = %#v is redelivered more than %d times (MaxDeliveries %d)", headerDeliveries, h[headerDeliveries], limit, limit)
			}
			h = amqp.Table{headerDeliveries: int64(c)}
		}

		d := &delivery{d: amqp.Delivery{Headers: amqp.Table{"k": n, "s": s, "i32": int32(n), "f": float64(n), "b": []byte(s), "t": amqp.Table{"x": s}}}}
		if got := d.Header("k"); got != strconv.FormatInt(n, 10) {
			t.Fatalf("Header of int64 %d = %q", n, got)
		}
		if got := d.Header("s"); got != s {
			t.Fatalf("Header of string %q = %q", s, got)
		}
		if got := d.Header("i32"); got != strconv.FormatInt(int64(int32(n)), 10) {
			t.Fatalf("Header of int32 %d = %q", int32(n), got)
		}
		for _, k := range []string{"f", "b", "t", "absent"} {
			_ = d.Header(k)
		}
		if d.Header("absent") != "" {
			t.Fatalf("an absent header reads %q", d.Header("absent"))
		}
	})
}
