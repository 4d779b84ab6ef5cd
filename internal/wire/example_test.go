package wire_test

import (
	"encoding/json"
	"fmt"

	"github.com/cloudbus-go/cloudbus/internal/wire"
)

func ExampleEncodeEnvelope() {
	env := &wire.Envelope{
		ID:           "6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4",
		Kind:         wire.KindSend,
		Type:         "refnode.v1.StartVm",
		ServiceID:    "vmInstance.3694776ab31a45709259254a018913ca",
		ResourceUUID: "932763162d054c04adaab6ab498c9139",
		Body:         json.RawMessage(`{"vm_uuid":"932763162d054c04adaab6ab498c9139"}`),
	}
	data, err := wire.EncodeEnvelope(env, 0)
	fmt.Println(string(data), err)

	_, err = wire.EncodeEnvelope(env, 64)
	fmt.Println(err)
	// Output:
	// {"protocol":1,"id":"6f1c3f0e6f2b4b0c9d35a0c1f1e2d3c4","kind":"send","type":"refnode.v1.StartVm","service_id":"vmInstance.3694776ab31a45709259254a018913ca","resource_uuid":"932763162d054c04adaab6ab498c9139","body":{"vm_uuid":"932763162d054c04adaab6ab498c9139"}} <nil>
	// too_large: message too large: 260 bytes exceeds the limit of 64 bytes
}
