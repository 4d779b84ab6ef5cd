package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
)

// TestBrokerPermissions runs a cluster under the least-privilege broker
// users of docs/operations.md ("Broker users: least privilege"), with
// the permissions TestBrokerPermissionsDoc holds the document to: two `refnode
// serve` processes log in as the node user, `refnode ctl` as the client
// user. The client's calls work, the nodes serve, leave and never meet a
// refusal, and the broker refuses the client user (ACCESS_REFUSED) a
// publish into a node's service queue or into api.portal through the
// default exchange, a broadcast, reading api.portal and binding a queue
// to the broadcast exchange.
func TestBrokerPermissions(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Timeout: 45 * time.Second})
	testStart := time.Now()
	pc := newProcCluster(t, ctx, broker, onSQLite, "perm")

	// The users, with the documented permissions for this test's prefix.
	tag := randomHex(4)
	prefix := pc.prefix
	clientUser, nodeUser := "cloudbus-test-client-"+tag, "cloudbus-test-node-"+tag
	perm := brokerPermissions(prefix)
	clientURL := brokerUser(t, ctx, broker, clientUser, perm["client"][0], perm["client"][1], perm["client"][2])
	nodeURL := brokerUser(t, ctx, broker, nodeUser, perm["node"][0], perm["node"][1], perm["node"][2])

	// Two nodes as the node user (by REFNODE_BUS: no password in argv).
	nodes, ids, r := pc.startSQLite(t, ctx, []string{"A", "B"}, []string{"REFNODE_BUS=" + nodeURL})
	t.Logf("2 nodes as broker user %s healthy, rings agreeing, %s after the test began", nodeUser, time.Since(testStart).Round(time.Millisecond))

	// refnode ctl as the client user: an image added, then read back.
	var added, got api.ImageReply
	ctl(t, ctx, clientURL, prefix, &added, "add-image", "-timeout", "10s", "-name", "perm-"+tag)
	require.True(t, message.IsCanonicalUUID(added.Image.UUID), "add-image returned an image UUID: %+v", added)
	assert.Equal(t, "perm-"+tag, added.Image.Name)
	assert.Equal(t, mustOwner(t, r, added.Image.UUID), added.Node, "AddImage ran on the image's owner")
	ctl(t, ctx, clientURL, prefix, &got, "get-image", "-timeout", "10s", added.Image.UUID)
	assert.Equal(t, added.Image, got.Image, "get-image reads back what add-image stored")
	t.Logf("refnode ctl as broker user %s: add-image and get-image work (image %s, owner %s)", clientUser, added.Image.UUID, added.Node)

	// The client user on its own connection: one channel per attempt, as a
	// refusal closes the channel.
	conn, err := amqp.DialConfig(clientURL, amqp.Config{Properties: amqp.Table{"connection_name": "refnode permissions test"}})
	require.NoError(t, err, "connect as the client user")
	defer conn.Close()
	portal := prefix + ".message.api.portal"
	svcQueue := prefix + ".message." + api.ImageService + "." + ids[0]
	broadcast, entry := prefix+".broadcast", prefix+".api"
	ownQueue := prefix + ".reply." + randomHex(8)
	for _, a := range []struct {
		what    string
		do      func(*amqp.Channel) error
		refused bool
	}{
		{"publish to service queue " + svcQueue + " through the default exchange", publishing("", svcQueue), true},
		{"publish to " + portal + " through the default exchange", publishing("", portal), true},
		{"publish to the broadcast exchange " + broadcast, publishing(broadcast, ""), true},
		{"consume " + portal, func(ch *amqp.Channel) error {
			_, err := ch.Consume(portal, "", true, false, false, false, nil)
			return err
		}, true},
		{"bind its own queue to " + broadcast, func(ch *amqp.Channel) error {
			if _, err := ch.QueueDeclare(ownQueue, false, true, true, false, nil); err != nil {
				return fmt.Errorf("declare %s, which the client user may: %v", ownQueue, err) // %v: not a refusal of the bind
			}
			return ch.QueueBind(ownQueue, "", broadcast, false, nil)
		}, true},
		// The control: the same kind of publish to the API entry is
		// confirmed. Its key is bound to no queue, so no node sees it.
		{"publish to the API entry " + entry + " (key bound to no queue)", publishing(entry, prefix+".message.nobody"), false},
	} {
		start := time.Now()
		err := onChannel(ctx, conn, a.do)
		took := time.Since(start).Round(time.Millisecond)
		if !a.refused {
			require.NoError(t, err, "the client user may %s", a.what)
			t.Logf("client user may %s: confirmed in %s", a.what, took)
			continue
		}
		var ae *amqp.Error
		require.ErrorAs(t, err, &ae, "the broker refuses the client user to %s", a.what)
		require.Equal(t, amqp.AccessRefused, ae.Code, "the broker refuses the client user to %s with ACCESS_REFUSED: %v", a.what, ae)
		t.Logf("client user may not %s: refused in %s: %s", a.what, took, ae.Reason)
	}
	require.NoError(t, conn.Close())

	// The nodes leave in order as the node user, which deletes their queues.
	termAt := time.Now()
	for _, c := range nodes {
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, c := range nodes {
		require.NoError(t, c.wait("SIGTERM", 15*time.Second))
		out, errOut := c.output()
		assert.NoError(t, c.waitErr, "node %s exits 0 after SIGTERM; stderr:\n%s", c.label, tail(errOut, 2000))
		assert.Contains(t, out, "left: ", "node %s left", c.label)
		assert.NotRegexp(t, refusalLog, out+errOut, "node %s met no refusal as the node user", c.label)
	}
	t.Logf("nodes exited 0 %s after SIGTERM; whole test %s", time.Since(termAt).Round(time.Millisecond), time.Since(testStart).Round(time.Millisecond))
}

// refusalLog matches what a node logs when the broker closes one of its
// channels, as it does on a refused operation: the reason
// (ACCESS_REFUSED) when amqpbus reports it, else amqpbus's words for a
// publishing channel the broker closed.
var refusalLog = regexp.MustCompile(`ACCESS_REFUSED|publishing channel \d+ closed|channel closed before the broker confirmed`)

// brokerPermissions returns the RabbitMQ permissions (configure, write,
// read) of the "node" and "client" users of a cluster with the given
// queue prefix: docs/operations.md, "Broker users: least privilege",
// gives them for the prefix cloudbus.
func brokerPermissions(prefix string) map[string][3]string {
	p := regexp.QuoteMeta(prefix) // '.' would need escaping; '-' does not
	return map[string][3]string{
		"node":   {`^` + p + `\..*`, `^(` + p + `\..*|amq\.default)$`, `^` + p + `\..*`},
		"client": {`^` + p + `\.reply\..*`, `^` + p + `\.api$`, `^` + p + `\.reply\..*`},
	}
}

// setPermissionsRE is a documented `rabbitmqctl set_permissions -p /
// cloudbus-<user> 'configure' 'write' 'read'` line.
var setPermissionsRE = regexp.MustCompile(`^rabbitmqctl set_permissions -p / cloudbus-(\w+) '([^']*)' '([^']*)' '([^']*)'$`)

// TestBrokerPermissionsDoc: docs/operations.md gives the node and client
// users the permissions TestBrokerPermissions runs a cluster with, for
// the default prefix.
func TestBrokerPermissionsDoc(t *testing.T) {
	lines := section(readDoc(t, operationsPath), "## Broker users: least privilege")
	require.NotEmpty(t, lines, "docs/operations.md has no section \"## Broker users: least privilege\" (TestBrokerPermissions cites it)")
	doc := map[string][3]string{}
	for _, l := range lines {
		if m := setPermissionsRE.FindStringSubmatch(l); m != nil {
			doc[m[1]] = [3]string{m[2], m[3], m[4]}
		}
	}
	assert.Equal(t, brokerPermissions("cloudbus"), doc,
		"docs/operations.md's rabbitmqctl set_permissions lines (configure, write, read) for cloudbus-node and cloudbus-client differ from what TestBrokerPermissions runs with: make them agree")
}

// brokerUser creates a broker user with a random password and these
// permissions on the broker's vhost, deletes it when the test ends, and
// returns the broker's URL with its credentials (never log it unmasked).
func brokerUser(t *testing.T, ctx context.Context, broker, name, configure, write, read string) string {
	t.Helper()
	password := randomHex(16)
	_, ok, err := rabbitmqctl(ctx, broker, "add_user", name, password)
	if !ok {
		if os.Getenv("CI") == "true" {
			t.Fatal("rabbitmqctl is not installed, and CI=true requires this test: it creates the broker users")
		}
		t.Skip("rabbitmqctl is not installed: the test cannot create broker users")
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, _, err := rabbitmqctl(cctx, broker, "delete_user", name); err != nil {
			t.Errorf("delete broker user %s: %v", name, err)
		}
	})
	_, _, err = rabbitmqctl(ctx, broker, "set_permissions", name, configure, write, read)
	require.NoError(t, err)
	u, err := url.Parse(broker)
	require.NoError(t, err)
	u.User = url.UserPassword(name, password)
	return u.String()
}

// publishing publishes one message in confirm mode: nil once the broker
// confirms it, the channel's close error if the broker closes it.
func publishing(exchange, key string) func(*amqp.Channel) error {
	return func(ch *amqp.Channel) error {
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		if err := ch.Confirm(false); err != nil {
			return fmt.Errorf("confirm mode: %v", err)
		}
		dc, err := ch.PublishWithDeferredConfirm(exchange, key, false, false,
			amqp.Publishing{ContentType: "text/plain", Body: []byte("refnode permissions test: not an envelope")})
		if err != nil {
			return err
		}
		wait := time.NewTimer(5 * time.Second)
		defer wait.Stop()
		select {
		case <-dc.Done():
			if dc.Acked() {
				return nil
			}
		case <-wait.C:
			return errors.New("neither confirmed nor refused within 5s")
		case e := <-closed:
			if e != nil {
				return e
			}
			return amqp.ErrClosed
		}
		select { // nacked, or the channel is closing: its error says why
		case e := <-closed:
			if e != nil {
				return e
			}
			return amqp.ErrClosed
		case <-wait.C:
			return errors.New("publish nacked")
		}
	}
}

// onChannel runs do on a new channel of conn, which it then closes.
func onChannel(ctx context.Context, conn *amqp.Connection, do func(*amqp.Channel) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel: %v", err)
	}
	defer ch.Close() // already closed after a refusal
	return do(ch)
}
