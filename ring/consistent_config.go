package ring

import (
	"errors"
	"fmt"
	"math"

	"github.com/buraksezer/consistent"
)

// Limits of [ConsistentConfig], guarding against accidental huge allocations.
const (
	// MaxConsistentPartitions is the largest accepted
	// [ConsistentConfig.PartitionCount].
	MaxConsistentPartitions = 1 << 22

	// MaxConsistentReplicationFactor is the largest accepted
	// [ConsistentConfig.ReplicationFactor].
	MaxConsistentReplicationFactor = 1 << 12
)

// ConsistentConfig configures a [Consistent] ring (github.com/buraksezer/consistent,
// consistent hashing with bounded loads). The zero value is valid and means
// [DefaultConsistentConfig]. Every node must use the same ConsistentConfig.
type ConsistentConfig struct {
	// PartitionCount is the number of partitions; a key's partition is its
	// xxhash modulo PartitionCount. It must be between 1 and
	// MaxConsistentPartitions; a ring holds at most PartitionCount members
	// (Add then fails with ErrTooManyMembers). Zero means 271.
	PartitionCount int

	// ReplicationFactor is the number of points (virtual nodes) each member
	// gets on the hash circle. It must be between 2 and
	// MaxConsistentReplicationFactor (the library panics with a single
	// member and a factor of 1). Zero means 20.
	ReplicationFactor int

	// Load bounds each member to ceil(floor(PartitionCount/members) × Load)
	// partitions. It must be finite and greater than 1 (at 1 the library
	// panics whenever members do not divide PartitionCount). Zero means 1.25.
	Load float64
}

// DefaultConsistentConfig returns the library's defaults, used for the zero
// [ConsistentConfig]. They rebuild fast but balance poorly (max/mean up to
// ~1.25) and move several times the ideal share of keys on a change; see the
// package documentation.
func DefaultConsistentConfig() ConsistentConfig {
	return ConsistentConfig{
		PartitionCount:    consistent.DefaultPartitionCount,    // 271
		ReplicationFactor: consistent.DefaultReplicationFactor, // 20 points per member
		Load:              consistent.DefaultLoad,              // 1.25
	}
}

// BalancedConsistentConfig returns settings with which a [Consistent] ring
// meets this package's balance targets (max/mean ≤ 1.10), at the price of
// slow rebuilds and several megabytes per ring copy; see the package
// documentation for measurements.
func BalancedConsistentConfig() ConsistentConfig {
	return ConsistentConfig{
		PartitionCount:    65521, // largest prime below 2^16: fine-grained load
		ReplicationFactor: 600,   // points per member: even spread before the load bound
		Load:              1.10,  // caps max/mean partitions at 1.10
	}
}

// Validate reports every problem with c, joined with [errors.Join]; nil means
// [NewConsistent] accepts c. Zero fields are valid: they mean the default.
func (c ConsistentConfig) Validate() error {
	var errs []error
	if p := c.PartitionCount; p < 0 || p > MaxConsistentPartitions {
		errs = append(errs, fmt.Errorf("ring: ConsistentConfig.PartitionCount is %d; it must be between 1 and %d (0 means %d)",
			p, MaxConsistentPartitions, consistent.DefaultPartitionCount))
	}
	if r := c.ReplicationFactor; r != 0 && (r < 2 || r > MaxConsistentReplicationFactor) {
		errs = append(errs, fmt.Errorf("ring: ConsistentConfig.ReplicationFactor is %d; it must be between 2 and %d (0 means %d)",
			r, MaxConsistentReplicationFactor, consistent.DefaultReplicationFactor))
	}
	if l := c.Load; l != 0 && (math.IsNaN(l) || math.IsInf(l, 0) || l <= 1) {
		errs = append(errs, fmt.Errorf("ring: ConsistentConfig.Load is %v; it must be finite and greater than 1 (0 means %v)",
			l, consistent.DefaultLoad))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c ConsistentConfig) withDefaults() ConsistentConfig {
	d := DefaultConsistentConfig()
	if c.PartitionCount == 0 {
		c.PartitionCount = d.PartitionCount
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = d.ReplicationFactor
	}
	if c.Load == 0 {
		c.Load = d.Load
	}
	return c
}

// fits reports whether n members can hold c.PartitionCount partitions under
// the load bound, computed exactly as the library does; the library panics
// when they cannot.
func (c ConsistentConfig) fits(n int) bool {
	if n == 0 {
		return true
	}
	perMember := math.Ceil(float64(c.PartitionCount/n) * c.Load)
	return perMember*float64(n) >= float64(c.PartitionCount)
}
