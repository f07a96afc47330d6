// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

// defaultMTU is the MTU GCE gives a VPC network created without one
// (https://cloud.google.com/vpc/docs/mtu: "1460 bytes" by default).
const defaultMTU = 1460

func (in *infra) networkMTU() int32 {
	if in.mtu == 0 {
		return defaultMTU
	}
	return in.mtu
}

// SetNetworkMTU sets the default network's MTU, as `gcloud compute
// networks update default --mtu=N` does. GCE accepts 1300 to 8896 bytes;
// any other value panics, as it is a bug in the calling test.
func (s *Server) SetNetworkMTU(mtu int32) {
	if mtu < 1300 || mtu > 8896 {
		panic("gcefake: MTU out of GCE's range 1300-8896")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.world.infra.mtu = mtu
}
