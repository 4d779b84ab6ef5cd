package main

import (
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
)

// The admin sections refnode adds to the node kit's GET /status
// (nodekit.Admin.Section): "hosts" and "vms".

// trackerStatus is the host tracker's counters (services.HostStats).
type trackerStatus struct {
	Tracked      int    `json:"tracked"`
	Pings        uint64 `json:"pings"`
	PingFailures uint64 `json:"ping_failures"`
	Reconnects   uint64 `json:"reconnects"`
	Takeovers    uint64 `json:"takeovers"`
}

// hostStatus is the "hosts" section.
func hostStatus(hs services.HostStats) trackerStatus {
	return trackerStatus{Tracked: hs.Tracked, Pings: hs.Pings, PingFailures: hs.PingFailures, Reconnects: hs.Reconnects, Takeovers: hs.Takeovers}
}

// sweeperStatus is the VM sweeper's counters (services.VMStats).
type sweeperStatus struct {
	Sweeps  uint64 `json:"sweeps"`
	Repairs uint64 `json:"repairs"`
	// Journaled counts the VMs whose hypervisor acted while their record
	// did not follow, waiting for a sweep; StaleJournal the journal
	// entries dropped because an acknowledged write changed the record
	// first.
	Journaled    int    `json:"journaled"`
	StaleJournal uint64 `json:"stale_journal"`
}

// vmStatus is the "vms" section.
func vmStatus(vs services.VMStats) sweeperStatus {
	return sweeperStatus{Sweeps: vs.Sweeps, Repairs: vs.Repairs, Journaled: vs.Journaled, StaleJournal: vs.StaleJournal}
}

// nodeStatus is the JSON of GET /status: the node kit's, and refnode's
// sections.
type nodeStatus struct {
	nodekit.Status
	// Hosts is the host tracker's work.
	Hosts trackerStatus `json:"hosts"`
	// VMs is the VM sweeper's work.
	VMs sweeperStatus `json:"vms"`
}
