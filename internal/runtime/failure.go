package runtime

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/podbay/podbay/internal/errdefs"
)

// An OCI runtime (runc, crun, a shim running runc) reports its failures as
// text. The few that are the request's fault rather than the runtime's are
// recognised here, by the runtime packages, and given an errdefs class, so
// that the server maps them to codes without knowing runc's messages.

// ClassifyExec classifies a runtime's failure to run an exec: runc
// refusing to start the program the exec names, in the container as it is
// now (`exec: "x": executable file not found in $PATH`, a missing path, a
// directory), is the request's fault, which only the container's file
// system can tell, as it is when the exec runs (found by TestCRIFuzz): the
// error then wraps errdefs.ErrInvalidArgument. An error that has a class
// already, and nil, are returned as they are.
func ClassifyExec(err error) error {
	if err == nil || errdefs.Code(err) != codes.Unknown || !programRefused(err.Error()) {
		return err
	}
	return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
}

// programRefused reports whether msg is runc refusing to start the
// program an exec names.
func programRefused(msg string) bool {
	return strings.Contains(msg, "unable to start container process: exec: \"")
}

// SysctlError is a runtime's create failing because the kernel refused a
// sysctl the container's spec sets ("write /proc/sys/net/ipv4/...:
// invalid argument"). A value out of the kernel's range is known only to
// the kernel: the server checks names, not values, so the refusal is the
// client's error all the same. It wraps errdefs.ErrInvalidArgument.
type SysctlError struct {
	// Name and Value are the sysctl as the spec sets it.
	Name, Value string
	// Err is the runtime's failure.
	Err error
}

func (e *SysctlError) Error() string {
	return fmt.Sprintf("the kernel refused sysctl %s=%q: %v: %v", e.Name, e.Value, e.Err, errdefs.ErrInvalidArgument)
}

func (e *SysctlError) Unwrap() []error { return []error{e.Err, errdefs.ErrInvalidArgument} }

// ClassifyCreate classifies a runtime's failure to create the container
// whose bundle is bundleDir: a sysctl of its spec that the kernel refused
// gives a *SysctlError. Other errors, and nil, are returned as they are.
func ClassifyCreate(err error, bundleDir string) error {
	if err == nil {
		return nil
	}
	spec, serr := ReadSpec(bundleDir)
	if serr != nil || spec.Linux == nil {
		return err
	}
	if name := refusedSysctl(err.Error(), spec.Linux.Sysctl); name != "" {
		return &SysctlError{Name: name, Value: spec.Linux.Sysctl[name], Err: err}
	}
	return err
}

// refusedSysctl returns the sysctl of sysctls that msg, from the runtime's
// create, says the kernel refused, or "".
func refusedSysctl(msg string, sysctls map[string]string) string {
	for name := range sysctls {
		// runc writes net.ipv4.conf.eth0/100.forwarding to
		// net/ipv4/conf/eth0.100/forwarding, older runc to .../eth0/100/...
		for _, p := range []string{strings.NewReplacer(".", "/", "/", ".").Replace(name), strings.ReplaceAll(name, ".", "/")} {
			if strings.Contains(msg, "/proc/sys/"+p+":") {
				return name
			}
		}
	}
	return ""
}
