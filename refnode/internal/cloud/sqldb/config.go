package sqldb

import (
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"

	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
)

// DefaultPrefix is the default table prefix: tables refnode_hosts,
// refnode_images, refnode_vms, refnode_jobs and refnode_meta (and the
// fence's, refnode_fence_*).
const DefaultPrefix = "refnode"

// Config configures [Open]; every zero field takes the default written
// beside it. The database is the pool's, opened by the caller.
type Config struct {
	// Prefix starts the table names: Prefix_hosts, Prefix_images,
	// Prefix_vms, Prefix_jobs and Prefix_meta. Lower-case letters, digits and
	// underscores, starting with a letter or underscore, at most 40
	// characters. Every node of one cluster uses the same prefix;
	// clusters (and tests) sharing a database use different ones.
	// Default [DefaultPrefix].
	Prefix string

	// HeartbeatTable is the heartbeat store's table in the same database
	// (sqlstore.Store.Table): writes are fenced by the writer's record
	// there (package fence). Default sqlstore.DefaultTable.
	HeartbeatTable string
	// MaxAge is the fence's limit on the writer's last beat
	// (sqlfence.Config.MaxAge): the heartbeat's EvictAfter. Default 3 s.
	MaxAge time.Duration
	// Fence, if set, is the fence of the records' writes, opened by the
	// caller on the same database (nodekit.Env.Fence); HeartbeatTable
	// and MaxAge are then its. Default: the store opens its own, tables
	// Prefix_fence_*.
	Fence *sqlfence.Fence

	// Logger receives the store's few logs (open, tables created); nil
	// discards them. The URL is logged masked.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix // one cluster per database
	}
	if c.HeartbeatTable == "" {
		c.HeartbeatTable = sqlstore.DefaultTable
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// prefixPattern is a table prefix that leaves room for "_images" within
// every database's identifier limit (PostgreSQL: 63 bytes).
var prefixPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// Validate reports every problem with the configuration at once. Zero
// fields are valid: they take defaults.
func (c Config) Validate() error {
	var errs []error
	if c.Prefix != "" && !prefixPattern.MatchString(c.Prefix) {
		errs = append(errs, fmt.Errorf("sqldb: config: Prefix %q is not a valid table prefix: use lower-case letters, digits and underscores, at most 40 characters", c.Prefix))
	}
	return errors.Join(errs...)
}
