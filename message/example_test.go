package message_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cloudbus-go/cloudbus/message"
)

// StartVm is a payload type a control plane registers under a stable name.
type StartVm struct {
	VMUUID string `json:"vm_uuid"`
}

func ExampleRegister() {
	reg := message.NewRegistry()
	message.MustRegister[StartVm](reg, "refnode.v1.StartVm")

	name, body, _ := reg.Encode(StartVm{VMUUID: "932763162d054c04adaab6ab498c9139"})
	fmt.Println(name, string(body))

	v, _ := reg.Decode(name, body)
	fmt.Printf("%T %s\n", v, v.(*StartVm).VMUUID)

	_, err := reg.Decode("os.v1.File", []byte(`{}`))
	fmt.Println(errors.Is(err, message.ErrUnknownMessage))
	// Output:
	// refnode.v1.StartVm {"vm_uuid":"932763162d054c04adaab6ab498c9139"}
	// *message_test.StartVm 932763162d054c04adaab6ab498c9139
	// true
}

func ExampleNormalizeUUID() {
	for _, s := range []string{
		"93276316-2D05-4C04-ADAA-B6AB498C9139",
		"932763162d054c04adaab6ab498c9139",
		"932763162d05",
	} {
		u, err := message.NormalizeUUID(s)
		fmt.Println(u, errors.Is(err, message.ErrInvalidUUID))
	}
	// Output:
	// 932763162d054c04adaab6ab498c9139 false
	// 932763162d054c04adaab6ab498c9139 false
	//  true
}

// An error sent in a reply keeps its code on the other node.
func ExampleError() {
	sent := message.ErrNotFound.WithDetails("vm 932763162d054c04adaab6ab498c9139")
	wire, _ := json.Marshal(sent)
	fmt.Println(string(wire))

	var received message.Error
	_ = json.Unmarshal(wire, &received)
	var err error = &received
	fmt.Println(errors.Is(err, message.ErrNotFound), errors.Is(err, message.ErrBusy))
	fmt.Println(received.Retry())
	// Output:
	// {"code":"not_found","retry":"never","description":"not found","details":"vm 932763162d054c04adaab6ab498c9139"}
	// true false
	// do not retry
}

// GetHost reads a host's record: it is about one existing host, so it is
// [message.Routed], here through a method on the pointer receiver.
type GetHost struct {
	UUID string `json:"uuid"`
}

// ResourceUUID names the host the message is about.
func (m *GetHost) ResourceUUID() string { return m.UUID }

// CreateVm creates a VM: no resource exists yet, so it is not Routed.
type CreateVm struct {
	Name string `json:"name"`
}

func ExampleResourceOf() {
	for _, msg := range []any{
		GetHost{UUID: "93276316-2D05-4C04-ADAA-B6AB498C9139"}, // a value finds the pointer method too
		&GetHost{UUID: "932763162d054c04adaab6ab498c9139"},
		CreateVm{Name: "web-1"},
		GetHost{},               // names no resource
		GetHost{UUID: "host-1"}, // not a UUID
		(*GetHost)(nil),         // names no resource either, and does not panic
	} {
		uuid, routed, err := message.ResourceOf(msg)
		switch {
		case err != nil:
			fmt.Printf("%-22T routed=%v, error %v\n", msg, routed, err)
		case !routed:
			fmt.Printf("%-22T not routed\n", msg)
		default:
			fmt.Printf("%-22T routed by %s\n", msg, uuid)
		}
	}
	// Output:
	// message_test.GetHost   routed by 932763162d054c04adaab6ab498c9139
	// *message_test.GetHost  routed by 932763162d054c04adaab6ab498c9139
	// message_test.CreateVm  not routed
	// message_test.GetHost   routed=true, error bad_request: bad request: message_test.GetHost is Routed but its ResourceUUID() returned "": it names no resource
	// message_test.GetHost   routed=true, error invalid_uuid: invalid UUID: want 32 hex digits, optionally dashed 8-4-4-4-12: ResourceUUID() of message_test.GetHost: "host-1": length 6, want 32 hex digits or 36 characters in the dashed form
	// *message_test.GetHost  routed=true, error bad_request: bad request: *message_test.GetHost is Routed but is a nil pointer: it names no resource
}

// Every code says whether a retry is safe. A typed call whose reply is not
// of the requested type fails with bad_reply: unlike unknown_message,
// the handler ran, so retrying would run it again.
func ExampleCode_Retry() {
	for _, c := range []message.Code{
		message.ErrBusy.Code,
		message.ErrBadRequest.Code,
		message.ErrUnknownMessage.Code,
		message.ErrTimeout.Code,
		message.ErrBadReply.Code,
		"from_a_newer_node",
	} {
		fmt.Printf("%-17s %s\n", c, c.Retry())
	}

	err := fmt.Errorf("bus: call refnode.v1.GetHost on host.x: %w",
		message.ErrBadReply.WithDetails("the handler ran and replied refnode.v1.Host, not the requested *Vm"))
	switch message.AsError(err).Retry() {
	case message.RetrySafe:
		fmt.Println("retry")
	case message.RetryRan:
		fmt.Println("ran once; fix the reply type instead of retrying")
	default:
		fmt.Println("give up")
	}
	// Output:
	// busy              safe to retry
	// bad_request       do not retry
	// unknown_message   do not retry
	// timeout           unknown outcome: retry only if idempotent
	// bad_reply         the operation ran: do not retry unless repeating it is intended
	// from_a_newer_node unknown outcome: retry only if idempotent
	// ran once; fix the reply type instead of retrying
}

// A service registers the codes of its own failures, with their retry
// classes, in package-level variables; its handlers return the
// sentinels, and callers match them with errors.Is. The class travels
// with the error, so a caller that never registered the code, in Go or
// another language, still knows not to retry.
func ExampleRegisterCode() {
	var errVolumeAttached = message.MustRegisterCode("volume_attached", message.RetryNever,
		"the volume is attached to another VM")

	// The handler's side.
	sent := errVolumeAttached.WithDetails("volume 5e0c1d2b3a4f4e5d9c8b7a6f5e4d3c2b is attached to vm 932763162d054c04adaab6ab498c9139")
	wire, _ := json.Marshal(sent)
	fmt.Println(string(wire))

	// The caller's side.
	var received message.Error
	_ = json.Unmarshal(wire, &received)
	fmt.Println(errors.Is(&received, errVolumeAttached), errors.Is(&received, message.ErrBadRequest))
	fmt.Println(received.Retry())
	// Output:
	// {"code":"volume_attached","retry":"never","description":"the volume is attached to another VM","details":"volume 5e0c1d2b3a4f4e5d9c8b7a6f5e4d3c2b is attached to vm 932763162d054c04adaab6ab498c9139"}
	// true false
	// do not retry
}
