package ring

import (
	"errors"
	"fmt"
	"math/bits"
)

const (
	// DefaultPartitions is the number of partitions a [Table] uses when
	// [Config.Partitions] is zero: 65536, which keeps the busiest of 100
	// members near 1.10× the mean load while a ring copy stays near 136 KB
	// (see the package documentation for measurements).
	DefaultPartitions = 1 << 16

	// MaxPartitions is the largest accepted [Config.Partitions] (4 Mi
	// partitions, 8 MiB of owner table per copy).
	MaxPartitions = 1 << 22

	// MaxMembers is the most members a [Table] holds: owners are stored as
	// 16-bit indexes to keep the partition table small.
	MaxMembers = 1<<16 - 1
)

// Config configures a [Table]. The zero value is valid and means
// [DefaultConfig]. Every node of a cluster must use the same Config, or nodes
// would disagree on owners even with equal fingerprints.
type Config struct {
	// Partitions is the number of partitions the key space is cut into; a
	// key's partition is the top log2(Partitions) bits of its xxhash. More
	// partitions balance load more evenly but make each ring copy larger
	// (2 bytes per partition) and Add/Remove slower (linear in Partitions).
	// It must be a power of two between 1 and MaxPartitions.
	// Zero means DefaultPartitions (65536).
	Partitions int
}

// DefaultConfig returns the configuration used for the zero [Config].
func DefaultConfig() Config {
	return Config{
		Partitions: DefaultPartitions, // 65536: max/mean ≈ 1.10 at 100 members, ~136 KB per copy, Add ≈ 0.4 ms
	}
}

// Validate reports every problem with c, joined with [errors.Join]; nil
// means [New] accepts c. Zero fields are valid: they mean the default.
func (c Config) Validate() error {
	var errs []error
	p := c.Partitions
	switch {
	case p < 0:
		errs = append(errs, fmt.Errorf("ring: Config.Partitions is %d; it must not be negative (0 means %d)", p, DefaultPartitions))
	case p > MaxPartitions:
		errs = append(errs, fmt.Errorf("ring: Config.Partitions is %d; it must be at most %d", p, MaxPartitions))
	}
	if p > 0 && bits.OnesCount(uint(p)) != 1 {
		errs = append(errs, fmt.Errorf("ring: Config.Partitions is %d; it must be a power of two (e.g. %d)", p, DefaultPartitions))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Partitions == 0 {
		c.Partitions = d.Partitions
	}
	return c
}
