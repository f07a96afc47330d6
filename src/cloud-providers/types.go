package provider

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
)

// Provider is what the adaptor calls for every peer pod.
type Provider interface {
	CreateInstance(ctx context.Context, podName, sandboxID string, cloudConfig cloudinit.CloudConfigGenerator, spec InstanceTypeSpec) (instance *Instance, err error)
	DeleteInstance(ctx context.Context, instanceID string) error
	Teardown() error
	ConfigVerifier() error
}

// KeyValueFlag is a flag.Value holding k1=v1,k2=v2 pairs.
type KeyValueFlag map[string]string

// String renders the pairs in key order so output is stable.
func (k *KeyValueFlag) String() string {
	if k == nil || *k == nil {
		return ""
	}
	keys := make([]string, 0, len(*k))
	for key := range *k {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, key := range keys {
		out = append(out, key+"="+(*k)[key])
	}
	return strings.Join(out, ", ")
}

// Set adds the pairs of a k1=v1,k2=v2 string.
func (k *KeyValueFlag) Set(value string) error {
	if *k == nil {
		*k = KeyValueFlag{}
	}
	for _, pair := range strings.Split(value, ",") {
		key, val, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("invalid key-value pair: %s", pair)
		}
		(*k)[strings.TrimSpace(key)] = strings.TrimSpace(val)
	}
	return nil
}

// Instance is a created podVM as the adaptor sees it; it dials IPs[0].
type Instance struct {
	ID   string
	Name string
	IPs  []netip.Addr
}

// InstanceTypeSpec is the shape a pod asks for, from its annotations.
// Memory is in MiB.
type InstanceTypeSpec struct {
	InstanceType string
	VCPUs        int64
	Memory       int64
	Arch         string
	GPUs         int64
	Image        string
	MultiNic     bool
	Volumes      []CloudVolume
}

// CloudVolume is a pre-provisioned disk to attach to the podVM.
type CloudVolume struct {
	DiskID string
}
