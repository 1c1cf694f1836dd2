package podrequest

import (
	"fmt"
	"math"
	"math/big"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/quantity"
)

// Bandwidth limits outside [minBandwidth, maxBandwidth] are refused, the
// range kubelet and containerd accept.
var (
	minBandwidth = big.NewRat(1_000, 1)                 // 1k
	maxBandwidth = big.NewRat(1_000_000_000_000_000, 1) // 1P
)

// PodBandwidth reads the pod's bandwidth annotations into the CNI
// "bandwidth" capability. It returns nil when neither is set. A rate comes
// with a burst of math.MaxUint32 bits, as containerd sends it: kubelet's
// annotations have no burst, and the bandwidth plugin refuses a rate
// without one. A value that is not a quantity or is out of range is
// errdefs.ErrInvalidArgument.
func PodBandwidth(podAnnotations map[string]string) (*network.Bandwidth, error) {
	ingress, err := bandwidthRate(podAnnotations, annotations.IngressBandwidth)
	if err != nil {
		return nil, err
	}
	egress, err := bandwidthRate(podAnnotations, annotations.EgressBandwidth)
	if err != nil {
		return nil, err
	}
	if ingress == 0 && egress == 0 {
		return nil, nil
	}
	bw := &network.Bandwidth{}
	if ingress > 0 {
		bw.IngressRate, bw.IngressBurst = ingress, math.MaxUint32
	}
	if egress > 0 {
		bw.EgressRate, bw.EgressBurst = egress, math.MaxUint32
	}
	return bw, nil
}

// bandwidthRate parses annotation key as a rate in bits per second; 0
// means the annotation is absent.
func bandwidthRate(podAnnotations map[string]string, key string) (uint64, error) {
	s, ok := podAnnotations[key]
	if !ok {
		return 0, nil
	}
	q, err := quantity.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("annotation %s=%q: %w: %w", key, s, errdefs.ErrInvalidArgument, err)
	}
	if q.Cmp(minBandwidth) < 0 || q.Cmp(maxBandwidth) > 0 {
		return 0, fmt.Errorf("annotation %s=%q: %w: outside [1k, 1P] bits per second",
			key, s, errdefs.ErrInvalidArgument)
	}
	return quantity.Ceil(q).Uint64(), nil
}
