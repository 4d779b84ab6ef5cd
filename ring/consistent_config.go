package ring

import (
	"errors"
	"fmt"
	"math"

	"github.com/buraksezer/consistent"
)

// Limits of [ConsistentConfig].
const (
	// MaxConsistentPartitions is the largest PartitionCount.
	MaxConsistentPartitions = 1 << 22

	// MaxConsistentReplicationFactor is the largest ReplicationFactor.
	MaxConsistentReplicationFactor = 1 << 12
)

// ConsistentConfig configures a [Consistent] ring; the zero value means
// [DefaultConsistentConfig]. Every node must use the same ConsistentConfig.
type ConsistentConfig struct {
	// PartitionCount is the number of partitions, up to
	// MaxConsistentPartitions, and the most members a ring holds.
	// Default 271.
	PartitionCount int

	// ReplicationFactor is each member's number of points on the hash
	// circle, 2 to MaxConsistentReplicationFactor. Default 20.
	ReplicationFactor int

	// Load bounds each member to ceil(floor(PartitionCount/members) × Load)
	// partitions; it must be finite and above 1. Default 1.25.
	Load float64
}

// DefaultConsistentConfig returns the library's defaults, those of the zero
// [ConsistentConfig].
func DefaultConsistentConfig() ConsistentConfig {
	return ConsistentConfig{
		PartitionCount:    consistent.DefaultPartitionCount,    // 271
		ReplicationFactor: consistent.DefaultReplicationFactor, // 20 points per member
		Load:              consistent.DefaultLoad,              // 1.25
	}
}

// BalancedConsistentConfig returns settings with which a [Consistent] ring
// meets the balance targets in docs/design.md ("The ring"), with slow
// changes.
func BalancedConsistentConfig() ConsistentConfig {
	return ConsistentConfig{
		PartitionCount:    65521, // the largest prime below 2^16
		ReplicationFactor: 600,
		Load:              1.10,
	}
}

// Validate reports every problem with c, joined; nil means [NewConsistent]
// accepts c.
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
// the load bound, as the library computes it.
func (c ConsistentConfig) fits(n int) bool {
	if n == 0 {
		return true
	}
	perMember := math.Ceil(float64(c.PartitionCount/n) * c.Load)
	return perMember*float64(n) >= float64(c.PartitionCount)
}
