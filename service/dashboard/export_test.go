package dashboard

// Builds returns how many snapshots this process's dashboards took.
func Builds() uint64 { return builds.Load() }
