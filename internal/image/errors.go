package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/docker/distribution/registry/api/errcode"
	"go.podman.io/image/v5/docker"

	"github.com/podbay/podbay/internal/errdefs"
)

// ErrUnauthorized classifies a pull the registry refused for missing or
// wrong credentials; the server answers PermissionDenied.
var ErrUnauthorized = fmt.Errorf("registry refused the credentials: %w", errdefs.ErrPermissionDenied)

// Registry error codes (OCI distribution spec) that mean "no such image".
var notFoundCodes = map[string]bool{
	"MANIFEST_UNKNOWN": true,
	"NAME_UNKNOWN":     true,
	"BLOB_UNKNOWN":     true,
}

// classifyPullError gives a registry error its class. The message keeps
// containers/image's text, which names the registry, mirrors and reference
// tried and what went wrong ("manifest unknown", "connection refused").
func classifyPullError(ref string, err error) error {
	var stall *ProgressTimeoutError
	switch {
	case errors.As(err, &stall):
		return err // classified, and names the reference
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("pull %s: %w", ref, err)
	case isUnauthorized(err):
		return fmt.Errorf("pull %s: %w: %w", ref, ErrUnauthorized, err)
	case isNotFound(err):
		return fmt.Errorf("pull %s: %w: %w", ref, errdefs.ErrNotFound, err)
	case isUnavailable(err):
		return fmt.Errorf("pull %s: registry %w: %w", ref, errdefs.ErrUnavailable, err)
	case isBlocked(err):
		return fmt.Errorf("pull %s: %w: %w", ref, errdefs.ErrFailedPrecondition, err)
	case isTooLarge(err):
		return fmt.Errorf("pull %s: the image's manifest or configuration is too large: %w: %w", ref, errdefs.ErrInvalidArgument, err)
	}
	return fmt.Errorf("pull %s: %w", ref, err)
}

func isUnauthorized(err error) bool {
	var unauth docker.ErrUnauthorizedForCredentials
	if errors.As(err, &unauth) {
		return true
	}
	if code, ok := registryCode(err); ok && (code == "UNAUTHORIZED" || code == "DENIED") {
		return true
	}
	var status docker.UnexpectedHTTPStatusError
	return errors.As(err, &status) && (status.StatusCode == http.StatusUnauthorized || status.StatusCode == http.StatusForbidden)
}

func isNotFound(err error) bool {
	if code, ok := registryCode(err); ok && notFoundCodes[code] {
		return true
	}
	var status docker.UnexpectedHTTPStatusError
	return errors.As(err, &status) && status.StatusCode == http.StatusNotFound
}

// isUnavailable reports a registry that could not be reached or answered
// that it cannot serve now: a retry later may succeed.
func isUnavailable(err error) bool {
	if errors.Is(err, docker.ErrTooManyRequests) {
		return true
	}
	var status docker.UnexpectedHTTPStatusError
	if errors.As(err, &status) && status.StatusCode >= 500 {
		return true
	}
	if code, ok := registryCode(err); ok && (code == "UNAVAILABLE" || code == "TOOMANYREQUESTS") {
		return true
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &opErr), errors.As(err, &dnsErr):
		return true
	case errors.As(err, &netErr) && netErr.Timeout():
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH,
		syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// isBlocked reports a registry the node's registries.conf blocks, which
// stays refused until the configuration changes (found by TestCRIFuzz).
// containers/image says so in text only.
func isBlocked(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "registry ") && strings.Contains(msg, " is blocked in ")
}

// isTooLarge reports a manifest, configuration or token past
// containers/image's size limits (iolimits: 4 MiB for a manifest or a
// config), which it says in text only.
func isTooLarge(err error) bool {
	return strings.Contains(err.Error(), "exceeded maximum allowed size of ")
}

// registryCode returns the OCI distribution error code in err, if any.
// docker/distribution decodes an error whose message is the code's default
// as a bare ErrorCode, any other as an Error.
func registryCode(err error) (string, bool) {
	var e errcode.Error
	if errors.As(err, &e) {
		return e.Code.Descriptor().Value, true
	}
	var code errcode.ErrorCode
	if errors.As(err, &code) {
		return code.Descriptor().Value, true
	}
	var es errcode.Errors
	if errors.As(err, &es) && len(es) > 0 {
		return registryCode(es[0])
	}
	return "", false
}
