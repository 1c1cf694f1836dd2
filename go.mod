module github.com/podbay/podbay

go 1.24.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/containernetworking/cni v1.2.3
	github.com/fsnotify/fsnotify v1.9.0
	github.com/opencontainers/runtime-spec v1.2.0
	github.com/prometheus/client_golang v1.22.0
	go.etcd.io/bbolt v1.4.3
	golang.org/x/sys v0.33.0
	google.golang.org/grpc v1.72.2
	google.golang.org/protobuf v1.36.12
	k8s.io/cri-api v0.34.1
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.63.0 // indirect
	github.com/prometheus/procfs v0.16.0 // indirect
	golang.org/x/net v0.38.0 // indirect
	golang.org/x/text v0.23.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250303144028-a0af3efb3deb // indirect
)
