package image

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"go.podman.io/image/v5/types"

	"github.com/podbay/podbay/internal/errdefs"
)

// Auth is a pull's registry credentials, as CRI's AuthConfig carries them.
// When given, they take precedence over any auth file on the host.
type Auth struct {
	Username string
	Password string
	// Auth is base64("user:password"), used when Username is empty.
	Auth          string
	IdentityToken string
	// RegistryToken is a bearer token sent as is.
	RegistryToken string
}

// dockerAuth converts a to containers/image's form; nil when a carries no
// username or identity token.
func (a *Auth) dockerAuth() (*types.DockerAuthConfig, error) {
	user, pass := a.Username, a.Password
	if user == "" && a.Auth != "" {
		raw, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return nil, fmt.Errorf("decode auth: %w: %w", err, errdefs.ErrInvalidArgument)
		}
		var ok bool
		user, pass, ok = strings.Cut(string(raw), ":")
		if !ok {
			return nil, fmt.Errorf("decode auth: not user:password: %w", errdefs.ErrInvalidArgument)
		}
	}
	if user == "" && pass == "" && a.IdentityToken == "" {
		return nil, nil
	}
	return &types.DockerAuthConfig{Username: user, Password: pass, IdentityToken: a.IdentityToken}, nil
}

// key identifies the credentials for de-duplicating concurrent pulls: a pull
// with other credentials must not be answered with this one's result.
func (a *Auth) key() string {
	if a == nil {
		return ""
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{a.Username, a.Password, a.Auth, a.IdentityToken, a.RegistryToken}, "\x00")))
	return hex.EncodeToString(sum[:])
}
