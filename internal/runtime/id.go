package runtime

import (
	"fmt"
	"regexp"

	"github.com/podbay/podbay/internal/errdefs"
)

// idPattern is runc's rule for container IDs. It also keeps IDs safe to
// use as file names in a runtime's state directories.
var idPattern = regexp.MustCompile(`^[\w+\-.]+$`)

// ValidName reports whether s follows runc's rule for container IDs
// (letters, digits and "_+-."), which makes it safe as a file name.
func ValidName(s string) bool {
	return s != "." && s != ".." && idPattern.MatchString(s)
}

// ValidateID checks a container ID; the error wraps
// errdefs.ErrInvalidArgument.
func ValidateID(id string) error {
	if !ValidName(id) {
		return fmt.Errorf("invalid container ID %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}
