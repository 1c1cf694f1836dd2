package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podbay/podbay/internal/config"
)

// partialDir is where podbayd keeps interrupted layer downloads under the
// image storage root, and partialCheckpointSuffix their checkpoints'
// suffix: internal/image's PartialDir and checkpoint files (doctor does
// not link the image store).
const (
	partialDir              = "podbay-partial"
	partialCheckpointSuffix = ".json"
)

// CheckPartialPulls lists the interrupted layer downloads kept for the
// next pull to resume: how many, their bytes and the oldest's age, against
// [image] partial_max_bytes and partial_ttl. It is OK whatever it finds
// (podbayd bounds and collects them); a directory that cannot be read is
// WARN.
func CheckPartialPulls(cfg *config.Config, now time.Time) Result {
	const check = "partial pulls"
	dir := filepath.Join(cfg.Image.StorageRoot, partialDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		entries, err = nil, nil
	}
	if err != nil {
		return warn(check, "check the directory's permissions", "%s: %v", dir, err)
	}
	var count int
	var total uint64
	var oldest time.Time
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || strings.HasSuffix(e.Name(), partialCheckpointSuffix) {
			continue
		}
		st, err := e.Info()
		if err != nil {
			continue
		}
		count++
		total += uint64(st.Size())
		if oldest.IsZero() || st.ModTime().Before(oldest) {
			oldest = st.ModTime()
		}
	}
	bound := fmt.Sprintf("partial_max_bytes %s, partial_ttl %s", humanBytes(uint64(cfg.Image.PartialMaxBytes)), time.Duration(cfg.Image.PartialTTL))
	if count == 0 {
		return ok(check, "%s: none (%s)", dir, bound)
	}
	return ok(check, "%s: %d interrupted layer downloads, %s, the oldest written %s ago (%s)",
		dir, count, humanBytes(total), now.Sub(oldest).Round(time.Second), bound)
}
