package ring_test

import (
	"fmt"

	"github.com/cloudbus-go/cloudbus/ring"
)

// Three management nodes, named by their canonical UUIDs.
var exampleNodes = []string{
	"5f1c0e6a9b2d4c3e8f7a6b5c4d3e2f10",
	"a0b1c2d3e4f5461788990aabbccddeef",
	"c3d2e1f0a9b84c7d9e6f5a4b3c2d1e0f",
}

func ExampleNew() {
	r, err := ring.New(ring.Config{}) // the zero Config means DefaultConfig
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, n := range exampleNodes {
		if err := r.Add(n); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println(len(r.Members()), "members,", r.Partitions(), "partitions")
	fmt.Println(r.Add(exampleNodes[0]))
	fmt.Println(r.Add(""))
	// Output:
	// 3 members, 262144 partitions
	// ring: add "5f1c0e6a9b2d4c3e8f7a6b5c4d3e2f10": ring: member already present; remove it first or use ring.Sync to reconcile
	// ring: add "": ring: invalid member; member names must be non-empty (use the node UUID)
}

func ExampleTable_Locate() {
	r, _ := ring.New(ring.Config{})
	_, err := r.Locate("7d444840e5b3455e9a4b1f1a6f4b9c1d")
	fmt.Println(err)

	_ = ring.Sync(r, exampleNodes)
	vm := "7d444840e5b3455e9a4b1f1a6f4b9c1d" // a resource UUID
	owner, _ := r.Locate(vm)
	fmt.Println("owner:", owner)

	// When the owner leaves, its keys move to the others.
	_ = r.Remove(owner)
	next, _ := r.Locate(vm)
	fmt.Println("after it leaves:", next)
	// Output:
	// ring: no members; add at least one member before locating keys
	// owner: c3d2e1f0a9b84c7d9e6f5a4b3c2d1e0f
	// after it leaves: a0b1c2d3e4f5461788990aabbccddeef
}

func ExampleFingerprintOf() {
	// Two nodes learn about members in different orders...
	nodeA, _ := ring.New(ring.Config{})
	nodeB, _ := ring.New(ring.Config{})
	for i := range exampleNodes {
		_ = nodeA.Add(exampleNodes[i])
		_ = nodeB.Add(exampleNodes[len(exampleNodes)-1-i])
	}
	// ...and compare fingerprints to check that their rings agree.
	fmt.Println(nodeA.Fingerprint() == nodeB.Fingerprint())
	fmt.Println(nodeA.Fingerprint() == ring.FingerprintOf(exampleNodes))
	fmt.Println(nodeA.Fingerprint())

	_ = nodeB.Remove(exampleNodes[1])
	fmt.Println(nodeA.Fingerprint() == nodeB.Fingerprint())
	// Output:
	// true
	// true
	// de654bd55f8f78cb
	// false
}
