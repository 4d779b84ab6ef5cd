package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

const ctlUsage = `Usage: refnode ctl [-bus url] [-prefix p] [-timeout d] COMMAND [flags] [args]
       refnode ctl [-api url] [-o table|json|yaml] RESOURCE VERB [flags] [args]

RESOURCE VERB (vm list, vm start, host add, ...) drives the cluster
through a node's REST API and prints tables: "refnode ctl vm -h" lists
them.

COMMAND drives a running cluster through api.portal on its broker, as a
client that is not a node, and prints the reply as one line of JSON: the
record, and which node handled the message ("node") and whose portal
forwarded it ("portal").

Commands:
  add-host [-name n] [-address a] [UUID]      add a host (a new UUID if none)
  add-image [-name n] [-url u] [-size-mb n] [UUID]
  create-vm [-name n] [-cpus n] [-memory-mb n] [-uuid u] IMAGE_UUID
  set-image-name [-if n] UUID NAME            rename; -if n: only if named n now
  start-vm UUID | stop-vm UUID | reboot-vm UUID | destroy-vm UUID
  get-vm UUID | get-host UUID | get-image UUID

Flags (before or after COMMAND; each may also be set by the REFNODE_*
variable shown; a flag wins):
  -bus url      RabbitMQ broker of the cluster (required;   REFNODE_BUS
                a RabbitMQ cluster's nodes comma-separated)
  -prefix p     the cluster's queue prefix (cloudbus)       REFNODE_PREFIX
  -timeout d    give up after this long (30s)               REFNODE_TIMEOUT
`

// ctlOptions are the flags every ctl command takes.
type ctlOptions struct {
	bus, prefix string
	timeout     time.Duration
}

func (o *ctlOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.bus, "bus", o.bus, "")
	fs.StringVar(&o.prefix, "prefix", o.prefix, "")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "")
}

// ctlCommand builds a command's message from its flags and arguments.
type ctlCommand struct {
	flags func(fs *flag.FlagSet) func(args []string) (msg any, err error)
	call  func(ctx context.Context, c *service.Client, msg any) (any, error)
}

// uuidArg builds a message about the resource named by the one argument.
func uuidArg(mk func(id string) any) func(fs *flag.FlagSet) func([]string) (any, error) {
	return func(*flag.FlagSet) func([]string) (any, error) {
		return func(args []string) (any, error) {
			if len(args) != 1 {
				return nil, errors.New("give one UUID")
			}
			id, err := message.NormalizeUUID(args[0])
			if err != nil {
				return nil, err
			}
			return mk(id), nil
		}
	}
}

// optionalUUID returns the one optional argument, normalized, or a new
// UUID.
func optionalUUID(args []string) (string, error) {
	switch len(args) {
	case 0:
		return message.NewUUID(), nil
	case 1:
		return message.NormalizeUUID(args[0])
	}
	return "", fmt.Errorf("unexpected argument %q", args[1])
}

func callAs[Resp any](ctx context.Context, c *service.Client, msg any) (any, error) {
	return service.Call[Resp](ctx, c, msg)
}

var ctlCommands = map[string]ctlCommand{
	"add-host": {flags: func(fs *flag.FlagSet) func([]string) (any, error) {
		name, addr := fs.String("name", "", ""), fs.String("address", "", "")
		return func(args []string) (any, error) {
			id, err := optionalUUID(args)
			return api.AddHost{UUID: id, Name: *name, Address: *addr}, err
		}
	}, call: callAs[api.HostReply]},
	"add-image": {flags: func(fs *flag.FlagSet) func([]string) (any, error) {
		name, url, size := fs.String("name", "", ""), fs.String("url", "", ""), fs.Int64("size-mb", 0, "")
		return func(args []string) (any, error) {
			id, err := optionalUUID(args)
			return api.AddImage{UUID: id, Name: *name, URL: *url, SizeMB: *size}, err
		}
	}, call: callAs[api.ImageReply]},
	"set-image-name": {flags: func(fs *flag.FlagSet) func([]string) (any, error) {
		ifName := fs.String("if", "", "")
		return func(args []string) (any, error) {
			if len(args) != 2 {
				return nil, errors.New("give the image's UUID and its new name")
			}
			id, err := message.NormalizeUUID(args[0])
			if err != nil {
				return nil, err
			}
			m := api.SetImageName{UUID: id, Name: args[1]}
			fs.Visit(func(f *flag.Flag) { // -if "" compares with the empty name
				if f.Name == "if" {
					m.IfName = ifName
				}
			})
			return m, nil
		}
	}, call: callAs[api.ImageNameSet]},
	"create-vm": {flags: func(fs *flag.FlagSet) func([]string) (any, error) {
		name, id := fs.String("name", "", ""), fs.String("uuid", "", "")
		cpus, mem := fs.Int("cpus", 0, ""), fs.Int("memory-mb", 0, "")
		return func(args []string) (any, error) {
			if len(args) != 1 {
				return nil, errors.New("give the UUID of the image to create the VM from")
			}
			return api.CreateVm{UUID: *id, Name: *name, ImageUUID: args[0], CPUs: *cpus, MemoryMB: *mem}, nil
		}
	}, call: callAs[api.VmCreated]},
	"start-vm":   {flags: uuidArg(func(id string) any { return api.StartVm{UUID: id} }), call: callAs[api.VmReply]},
	"stop-vm":    {flags: uuidArg(func(id string) any { return api.StopVm{UUID: id} }), call: callAs[api.VmReply]},
	"reboot-vm":  {flags: uuidArg(func(id string) any { return api.RebootVm{UUID: id} }), call: callAs[api.VmReply]},
	"destroy-vm": {flags: uuidArg(func(id string) any { return api.DestroyVm{UUID: id} }), call: callAs[api.VmReply]},
	"get-vm":     {flags: uuidArg(func(id string) any { return api.GetVm{UUID: id} }), call: callAs[api.VmReply]},
	"get-host":   {flags: uuidArg(func(id string) any { return api.GetHost{UUID: id} }), call: callAs[api.HostReply]},
	"get-image":  {flags: uuidArg(func(id string) any { return api.GetImage{UUID: id} }), call: callAs[api.ImageReply]},
}

func ctlCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "refnode ctl: %v\nRun \"refnode ctl -h\" for the commands and flags.\n", err)
		return 2
	}
	o := ctlOptions{prefix: bus.DefaultPrefix, timeout: 30 * time.Second}
	ro := restOptions{output: "table"}
	fs := flag.NewFlagSet("refnode ctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.bind(fs)
	ro.bind(fs, false)
	env := map[string]string{"bus": "REFNODE_BUS", "prefix": "REFNODE_PREFIX", "timeout": "REFNODE_TIMEOUT"}
	for k, v := range restEnv {
		env[k] = v
	}
	err := parseFlags(fs, args, getenv, env)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, ctlUsage)
		return 0
	case err != nil:
		return usageErr(err)
	case fs.NArg() == 0:
		return usageErr(errors.New("give a command"))
	}
	name := fs.Arg(0)
	if ctlResources[name] {
		ro.timeout = o.timeout
		return ctlREST(ctx, ro, fs.Args(), stdout, stderr, getenv)
	}
	cmd, ok := ctlCommands[name]
	if !ok {
		return usageErr(fmt.Errorf("unknown command %q", name))
	}
	sub := flag.NewFlagSet("refnode ctl "+name, flag.ContinueOnError)
	sub.SetOutput(io.Discard)
	o.bind(sub) // the common flags may follow the command too
	build := cmd.flags(sub)
	if err := sub.Parse(fs.Args()[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, ctlUsage)
			return 0
		}
		return usageErr(fmt.Errorf("%s: %w", name, err))
	}
	msg, err := build(sub.Args())
	switch {
	case err != nil:
		return usageErr(fmt.Errorf("%s: %w", name, err))
	case o.bus == "":
		return usageErr(errors.New("-bus (or REFNODE_BUS) is required: the amqp:// URL of the cluster's RabbitMQ broker"))
	case o.timeout <= 0:
		return usageErr(errors.New("-timeout must be positive"))
	}

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	reply, err := ctlCall(ctx, o, func(ctx context.Context, c *service.Client) (any, error) { return cmd.call(ctx, c, msg) })
	if err != nil {
		fmt.Fprintf(stderr, "refnode ctl %s: %v\n", name, err)
		return 1
	}
	line, err := json.Marshal(reply)
	if err != nil {
		fmt.Fprintf(stderr, "refnode ctl %s: encode the reply: %v\n", name, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", line)
	return 0
}

// ctlCall connects a client to the cluster's broker, runs call and
// disconnects.
func ctlCall(ctx context.Context, o ctlOptions, call func(context.Context, *service.Client) (any, error)) (any, error) {
	for _, u := range amqpbus.SplitURLs(o.bus) {
		if !strings.HasPrefix(u, "amqp://") && !strings.HasPrefix(u, "amqps://") {
			return nil, fmt.Errorf("-bus %s is not an amqp:// or amqps:// URL", amqpbus.MaskURL(u))
		}
	}
	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: o.bus, ConnectionName: "refnode ctl"})
	if err != nil {
		return nil, fmt.Errorf("connect to the broker: %w; check -bus and that RabbitMQ runs", err)
	}
	reg := message.NewRegistry()
	if err := api.Register(reg); err != nil {
		_ = tr.Close()
		return nil, err
	}
	c, err := service.NewClient(ctx, service.ClientConfig{Transport: tr, Prefix: o.prefix, Registry: reg, DefaultTimeout: o.timeout, OwnTransport: true})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	defer c.Close()
	reply, err := call(ctx, c)
	if errors.Is(err, message.ErrNoRoute) {
		err = fmt.Errorf("%w (is a node with -prefix %s running on this broker?)", err, o.prefix)
	}
	return reply, err
}
