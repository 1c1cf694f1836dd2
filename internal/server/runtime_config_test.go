package server

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
)

func driverServer(driver, parent string) *Server {
	cfg := config.Default()
	cfg.CgroupDriver, cfg.DefaultCgroupParent = driver, parent
	return &Server{cfg: cfg}
}

func TestRuntimeConfigReportsDriver(t *testing.T) {
	for driver, want := range map[string]runtimeapi.CgroupDriver{
		"systemd": runtimeapi.CgroupDriver_SYSTEMD, "cgroupfs": runtimeapi.CgroupDriver_CGROUPFS,
	} {
		resp, err := driverServer(driver, "/podbay").RuntimeConfig(context.Background(), &runtimeapi.RuntimeConfigRequest{})
		if err != nil || resp.GetLinux().GetCgroupDriver() != want {
			t.Errorf("%s: RuntimeConfig = %v, %v; want %v", driver, resp, err, want)
		}
	}
}
