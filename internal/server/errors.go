package server

import (
	"fmt"

	"github.com/podbay/podbay/internal/errdefs"
)

// errInvalid is a bad-input error: errdefs.ErrInvalidArgument, which the
// interceptor answers with gRPC InvalidArgument.
func errInvalid(msg string) error { return fmt.Errorf("%s: %w", msg, errdefs.ErrInvalidArgument) }
