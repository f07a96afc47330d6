// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// SetReadyForCAA adds to GCE's defaults what a project needs before CAA
// can run private podVMs in us-central1, as docs/install.md sets it up: a
// Cloud NAT for the default subnetwork, Private Google Access, and a VPC
// MTU of 1500 (the pod tunnel's 1450 and VXLAN's 50). The demo, the
// emulator command and preflight's tests start from it.
func (s *Server) SetReadyForCAA() error {
	nat := &computepb.Router{
		Name:    proto.String("nat-router"),
		Network: proto.String("global/networks/default"),
		Nats: []*computepb.RouterNat{{
			Name:                          proto.String("nat"),
			NatIpAllocateOption:           proto.String("AUTO_ONLY"),
			SourceSubnetworkIpRangesToNat: proto.String("LIST_OF_SUBNETWORKS"),
			Subnetworks:                   []*computepb.RouterNatSubnetworkToNat{{Name: proto.String("regions/us-central1/subnetworks/default")}},
		}},
	}
	if err := s.AddRouter("us-central1", nat); err != nil {
		return err
	}
	s.SetPrivateGoogleAccess("us-central1", true)
	s.SetNetworkMTU(1500)
	return nil
}
