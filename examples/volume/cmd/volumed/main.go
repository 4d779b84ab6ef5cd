// Command volumed runs a node of the volume service: go run
// ./examples/volume/cmd/volumed -bus amqp://… -db postgres://… (flags
// and VOLUME_* variables: volumed -h).
package main

import (
	"context"

	"github.com/cloudbus-go/cloudbus/examples/volume"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

func main() {
	reg := message.NewRegistry()
	if err := volume.Register(reg); err != nil {
		panic(err)
	}
	nodekit.Main(nodekit.Config{
		Name:     "volume",
		Command:  "volumed",
		Registry: reg,
		Schema:   &volume.Schema,
		Services: func(_ context.Context, env nodekit.Env) ([]service.Service, error) {
			return []service.Service{volume.New(env)}, nil
		},
	})
}
