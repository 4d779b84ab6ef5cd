package servicetest

// MergeHeartbeat exposes mergeHeartbeat to the external tests.
var MergeHeartbeat = mergeHeartbeat
