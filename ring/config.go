package ring

import (
	"errors"
	"fmt"
	"math/bits"
)

const (
	// DefaultPartitions is the default [Config.Partitions]: 262144, the
	// fewest that keep a change's movement within 1.1 times the ideal at
	// 100 members under the load bound; the table takes 512 KiB.
	DefaultPartitions = 1 << 18

	// MaxPartitions is the largest [Config.Partitions].
	MaxPartitions = 1 << 22

	// MaxMembers is the most members a [Table] holds.
	MaxMembers = 1<<16 - 1
)

// Config configures a [Table]; the zero value means [DefaultConfig]. Every
// node of a cluster must use the same Config.
type Config struct {
	// Partitions is the number of partitions, a power of two up to
	// MaxPartitions. Default [DefaultPartitions].
	Partitions int
}

// DefaultConfig returns the configuration of the zero [Config].
func DefaultConfig() Config {
	return Config{
		Partitions: DefaultPartitions,
	}
}

// Validate reports every problem with c, joined; nil means [New] accepts c.
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
