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
	// {"code":"not_found","description":"not found","details":"vm 932763162d054c04adaab6ab498c9139"}
	// true false
	// do not retry
}

func ExampleEncodeEnvelope() {
	env := &message.Envelope{
		ID:           "6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4",
		Kind:         message.KindSend,
		Type:         "refnode.v1.StartVm",
		ServiceID:    "vmInstance.3694776ab31a45709259254a018913ca",
		ResourceUUID: "932763162d054c04adaab6ab498c9139",
		Body:         json.RawMessage(`{"vm_uuid":"932763162d054c04adaab6ab498c9139"}`),
	}
	data, err := message.EncodeEnvelope(env, 0)
	fmt.Println(string(data), err)

	_, err = message.EncodeEnvelope(env, 64)
	fmt.Println(err)
	// Output:
	// {"id":"6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4","kind":"send","type":"refnode.v1.StartVm","service_id":"vmInstance.3694776ab31a45709259254a018913ca","resource_uuid":"932763162d054c04adaab6ab498c9139","body":{"vm_uuid":"932763162d054c04adaab6ab498c9139"}} <nil>
	// too_large: message too large: 247 bytes exceeds the limit of 64 bytes
}
