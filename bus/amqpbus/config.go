package amqpbus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/message"
)

// Config configures a [Transport]. URL is required; every other zero
// field takes the default written beside it.
type Config struct {
	// URL of the broker: amqp://user:password@host:port/vhost, or amqps://
	// for TLS. Credentials come from here (or from the broker's defaults)
	// and never appear in logs or errors: see [MaskURL].
	//
	// For a RabbitMQ cluster, list one URL per broker node, separated by
	// commas (a comma inside a password is written %2C). The transport
	// connects to one of them, chosen at random so that nodes spread over
	// the brokers, and when that connection is lost it tries the next,
	// round the list, with backoff, declaring its whole topology again on
	// each new connection.
	URL string

	// QueueType is the RabbitMQ queue type of the durable queues (the
	// service queues, the API portal and the dead-letter queue):
	// [QueueClassic], the default, or [QueueQuorum], replicated over a
	// majority of a cluster's nodes so that they and their messages
	// outlive the loss of a broker node. Reply and event queues are
	// always classic: they live and die with one connection, which quorum
	// queues refuse (no exclusive or auto-delete quorum queue). Every
	// node of a cluster must use the same type: declaring a queue that
	// exists with the other type fails, naming both.
	QueueType QueueType

	// TLS configures amqps:// connections (root CAs, client certificates,
	// server name). Default: the system roots and the URL's host name.
	TLS *tls.Config

	// Dial, optional, opens the TCP connection (for example through a
	// proxy). Default: net.Dialer with DialTimeout.
	Dial func(network, addr string) (net.Conn, error)

	// ConnectionName is shown in the broker's connection list. Default
	// "cloudbus".
	ConnectionName string

	// DialTimeout bounds connecting and the AMQP handshake. Default 10 s.
	DialTimeout time.Duration

	// Heartbeat is the AMQP heartbeat interval, in whole seconds. The
	// broker closes the connection of a client silent for about two of
	// them and gives its unacknowledged deliveries to other consumers.
	// Default 1 s, the minimum.
	Heartbeat time.Duration

	// ProbeInterval is how often the transport checks that the broker
	// answers, with a round trip on a channel of its own: a link that
	// silently drops everything is noticed within ProbeInterval +
	// ProbeTimeout. Default 250 ms.
	ProbeInterval time.Duration

	// ProbeTimeout is how long a probe may wait for the broker's answer,
	// while no other byte arrives either and the broker takes none of the
	// bytes queued ahead of the probe, before the connection is declared
	// dead, closed and reconnected. Default 1 s.
	ProbeTimeout time.Duration

	// ReconnectMax caps the backoff between reconnection attempts after
	// the connection dropped; attempts start 50 ms apart, double, and
	// carry ±20 % jitter. Default 2 s.
	ReconnectMax time.Duration

	// Publishers is the number of channels publishing in parallel, each in
	// confirm mode with its own goroutine; as many more publish in the
	// fast delivery mode ([Transport.PublishFast]). Default 4.
	Publishers int

	// PublishTimeout bounds a publish whose ctx has no deadline, so that a
	// caller never hangs (for example while the broker blocks publishers on
	// a memory alarm). Default 30 s.
	PublishTimeout time.Duration

	// QueueExpires is the x-expires of durable queues: a queue nobody
	// consumed or declared for this long is deleted by the broker, with its
	// messages. It must stay well above the eviction threshold plus the
	// time a survivor needs to drain a dead node's queues; at least a
	// minute. Default 30 min. Every node of a cluster must use the same
	// value: the broker refuses to redeclare a queue with other arguments.
	QueueExpires time.Duration

	// MaxMessageSize bounds a published message; a larger one fails with
	// message.ErrTooLarge before anything is sent. A received body longer
	// than this is cut to MaxMessageSize+1 bytes as it arrives. Default
	// message.DefaultMaxSize (4 MiB).
	MaxMessageSize int

	// Logger receives the transport's logs; nil discards them.
	Logger *slog.Logger
}

// QueueType is the RabbitMQ type of a transport's durable queues; see
// [Config.QueueType].
type QueueType string

// The queue types.
const (
	// QueueClassic is RabbitMQ's classic queue: on one broker node,
	// unavailable while that node is down, and lost with its disk.
	QueueClassic QueueType = "classic"
	// QueueQuorum is RabbitMQ's quorum queue (Raft): replicated on every
	// node of the cluster (RabbitMQ's default initial group size is up to
	// 3), available while a majority of its members runs; a publish is
	// confirmed once a majority holds the message.
	QueueQuorum QueueType = "quorum"
)

// ParseQueueType parses "classic" or "quorum"; "" is classic.
func ParseQueueType(s string) (QueueType, error) {
	switch QueueType(strings.ToLower(strings.TrimSpace(s))) {
	case "", QueueClassic:
		return QueueClassic, nil
	case QueueQuorum:
		return QueueQuorum, nil
	}
	return "", fmt.Errorf("amqpbus: queue type %q: want classic or quorum", s)
}

// SplitURLs splits a comma-separated list of broker URLs (see
// [Config.URL]), dropping blanks around and between them.
func SplitURLs(list string) []string {
	var urls []string
	for u := range strings.SplitSeq(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}

// MaskURLs masks each URL of a comma-separated list with [MaskURL].
func MaskURLs(list string) string {
	urls := SplitURLs(list)
	for i, u := range urls {
		urls[i] = MaskURL(u)
	}
	return strings.Join(urls, ",")
}

func (c *Config) setDefaults() {
	if c.QueueType == "" {
		c.QueueType = QueueClassic
	}
	if c.ConnectionName == "" {
		c.ConnectionName = "cloudbus"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = time.Second
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = 250 * time.Millisecond
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = time.Second
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 2 * time.Second
	}
	if c.Publishers == 0 {
		c.Publishers = 4
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 30 * time.Second
	}
	if c.QueueExpires == 0 {
		c.QueueExpires = 30 * time.Minute
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = message.DefaultMaxSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem with the configuration at once, naming
// the URL only in masked form.
func (c *Config) Validate() error {
	var errs []error
	urls := SplitURLs(c.URL)
	if len(urls) == 0 {
		errs = append(errs, errors.New("amqpbus: config: URL is required, e.g. amqp://user:password@127.0.0.1:5672/"))
	}
	for _, u := range urls {
		if _, err := amqp.ParseURI(u); err != nil {
			errs = append(errs, fmt.Errorf("amqpbus: config: URL %s is not an AMQP URI (amqp:// or amqps://)", MaskURL(u)))
		}
	}
	if c.QueueType != "" && c.QueueType != QueueClassic && c.QueueType != QueueQuorum {
		errs = append(errs, fmt.Errorf("amqpbus: config: QueueType %q: want %q or %q", c.QueueType, QueueClassic, QueueQuorum))
	}
	if c.Publishers < 0 || c.DialTimeout < 0 || c.ReconnectMax < 0 || c.Heartbeat < 0 || c.PublishTimeout < 0 || c.MaxMessageSize < 0 ||
		c.ProbeInterval < 0 || c.ProbeTimeout < 0 {
		errs = append(errs, errors.New("amqpbus: config: counts and durations must not be negative"))
	}
	if c.Heartbeat > 0 && (c.Heartbeat < time.Second || c.Heartbeat%time.Second != 0) {
		errs = append(errs, fmt.Errorf("amqpbus: config: Heartbeat %s must be whole seconds, at least 1 s: AMQP counts heartbeats in seconds, and amqp091-go would take the broker's 60 s for less", c.Heartbeat))
	}
	if c.QueueExpires != 0 && c.QueueExpires < time.Minute {
		errs = append(errs, fmt.Errorf("amqpbus: config: QueueExpires %s is too short: a dead node's queue must outlive eviction and draining (use minutes)", c.QueueExpires))
	}
	return errors.Join(errs...)
}

// MaskURL returns u with its password replaced by "xxxxx", for logs and
// errors. A string that does not parse as a URL is replaced whole.
func MaskURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || strings.Contains(p.Opaque+p.Path+p.RawQuery+p.Fragment, "@") {
		return "(unparsable URL)" // an '@' past the host: the password may follow it
	}
	if p.User != nil {
		if _, has := p.User.Password(); has {
			p.User = url.UserPassword(p.User.Username(), "xxxxx")
		}
	}
	return p.Redacted()
}
