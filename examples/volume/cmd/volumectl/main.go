// Command volumectl drives a volume cluster through api.portal, as a
// client that is not a node:
//
//	volumectl -bus amqp://… create NAME SIZE_GB
//	volumectl -bus amqp://… attach VOLUME VM
//	volumectl -bus amqp://… detach VOLUME
//	volumectl -bus amqp://… get VOLUME
//
// It prints the reply as one line of JSON, or the error and its code on
// stderr (exit 1). -bus defaults to VOLUME_BUS, -prefix to VOLUME_PREFIX
// or cloudbus.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/examples/volume"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

const usage = `usage: volumectl [-bus amqp://…] [-prefix p] [-timeout d] COMMAND
  create NAME SIZE_GB    create a volume (on the node api.portal picks)
  attach VOLUME VM       attach a volume to a VM (on the volume's owner)
  detach VOLUME          detach it
  get VOLUME             read it
`

func main() {
	busURL := flag.String("bus", os.Getenv("VOLUME_BUS"), "RabbitMQ broker (VOLUME_BUS)")
	prefix := flag.String("prefix", envOr("VOLUME_PREFIX", bus.DefaultPrefix), "queue prefix of the cluster (VOLUME_PREFIX)")
	timeout := flag.Duration("timeout", 10*time.Second, "give up after this long")
	flag.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	flag.Parse()
	msg, err := parse(flag.Args())
	if err != nil || *busURL == "" {
		if err == nil {
			err = fmt.Errorf("-bus (or VOLUME_BUS) is required")
		}
		fmt.Fprintf(os.Stderr, "volumectl: %v\n%s", err, usage)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	v, err := call(ctx, *busURL, *prefix, msg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "volumectl: %v (code %s: %s)\n", err, message.CodeOf(err), message.AsError(err).Retry())
		os.Exit(1)
	}
	out, _ := json.Marshal(v)
	fmt.Println(string(out))
}

// call sends msg through api.portal, retrying by the same message id if
// the owner dies mid-call (the handlers are idempotent).
func call(ctx context.Context, busURL, prefix string, msg any) (volume.Volume, error) {
	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: busURL, ConnectionName: "volumectl"})
	if err != nil {
		return volume.Volume{}, err
	}
	reg := message.NewRegistry()
	if err := volume.Register(reg); err != nil {
		return volume.Volume{}, err
	}
	cl, err := service.NewClient(ctx, service.ClientConfig{Transport: tr, OwnTransport: true, Prefix: prefix, Registry: reg})
	if err != nil {
		_ = tr.Close()
		return volume.Volume{}, err
	}
	defer cl.Close()
	return service.Call[volume.Volume](ctx, cl, msg, bus.WithRetry(3))
}

// parse turns the command line into a message.
func parse(args []string) (any, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("no command")
	}
	want := map[string]int{"create": 3, "attach": 3, "detach": 2, "get": 2}[args[0]]
	if want == 0 || len(args) != want {
		return nil, fmt.Errorf("bad command %q", args)
	}
	switch args[0] {
	case "create":
		size, err := strconv.Atoi(args[2])
		if err != nil {
			return nil, fmt.Errorf("SIZE_GB %q is not a number", args[2])
		}
		return volume.CreateVolume{Name: args[1], SizeGB: size}, nil
	case "attach":
		return volume.AttachVolume{Volume: args[1], VM: args[2]}, nil
	case "detach":
		return volume.DetachVolume{Volume: args[1]}, nil
	}
	return volume.GetVolume{Volume: args[1]}, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
