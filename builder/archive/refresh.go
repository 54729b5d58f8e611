package archive

import (
	"fmt"
	"os"
	"path/filepath"
)

// Refresh makes every private configuration under cache read its package
// lists afresh at its next use, as if they were a day old: what a command
// that follows the archives needs to see an upload at once. The host's own
// configuration (bookworm's) is left to apt.
func Refresh(cache string) error {
	stamps, err := filepath.Glob(filepath.Join(cache, "apt", "*", "updated"))
	if err != nil {
		return fmt.Errorf("refresh package lists: %w", err)
	}
	for _, s := range stamps {
		if err := os.Remove(s); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("refresh package lists: %w", err)
		}
	}
	return nil
}
