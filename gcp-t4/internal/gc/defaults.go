package gc

import "time"

// The reaper's defaults, which `gcp-t4 install` also writes and documents
// as the REAPER_* keys of peer-pods-cm: defined here only (gc's defaults,
// with no interval and no metrics, are gc's own).
const (
	DefaultReaperInterval    = time.Minute
	DefaultReaperMetricsAddr = ":9103"
)
